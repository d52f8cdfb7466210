#!/usr/bin/env bash
# Run fstests (xfstests) against jbdfs, over each FUSE transport asked for,
# and against Linux's own ext3 on loop devices as the reference, in one run.
#
#   scripts/fstests.sh [OPTIONS] [TEST...]
#
#   TEST...             tests to run (generic/001 ...)
#   -g GROUP            every generic/ test of an fstests group (-g quick);
#                       may be given more than once
#   --quick-sample      the fixed CI list in scripts/fstests.quick-sample
#                       (100 generic/ tests, some of them "not run")
#   --transport T       jbdfs over dev_fuse (-o noio_uring; the default),
#                       io_uring (-o io_uring) or both. For io_uring the
#                       script turns /sys/module/fuse/parameters/enable_uring
#                       on and puts back what it found, on any exit
#   --devices D         what jbdfs's TEST_DEV and SCRATCH_DEV are: loop
#                       (loop devices over the image files, as for ext3;
#                       the default) or file (the image files themselves).
#                       Without loop devices the run falls back to file,
#                       loudly (a failure with CI set, or when asked for)
#   --no-ext3           do not run the ext3 reference
#   --no-jbdfs          run only the ext3 reference
#   --exclude FILE      tests not run on jbdfs, one per line with the reason
#                       as a comment (default scripts/fstests.exclude)
#   --known-failures 'TEST=REASON'  a jbdfs failure the run tolerates (the
#                       issue or reason says why); may be given more than
#                       once. A listed test that passes is reported, to be
#                       taken off the list
#   --timeout SECS      one test's limit; past it the test is "hung" (default 600)
#   --size SIZE         each image's size (default 4G; sparse files)
#   --results DIR       where results go (default a new
#                       $JBDFS_WORKDIR/jbdfs-fstests-results.XXXXXX)
#   --keep              keep the images
#
# fstests comes from $FSTESTS_SRC (a source tree) or else from the tarball
# $JBDFS_FSTESTS_TARBALL (default ../shared/fstests/xfstests-63a29724.tar.gz
# beside the checkout, else /work/shared/fstests/), unpacked and built once
# into ${JBDFS_FSTESTS_DIR:-/tmp/jbdfs-fstests}/<tarball name> and reused.
# The tree is patched so that fstests' _fs_type maps the mount type
# fuse.jbdfs to fuse, and so that check does not wipe a fuse SCRATCH_DEV
# before each test (fstests cannot make a fuse filesystem again). Its
# Debian build dependencies are installed with apt-get, and the users
# fsgqa, fsgqa2, 123456-fsgqa and the group fsgqa are created when missing.
#
# jbdfs: FSTYP=fuse, FUSE_SUBTYP=.jbdfs, TEST_DEV and SCRATCH_DEV are loop
# devices over image files (or, with --devices file, the image files), made
# by mkfs-jbdfs, and fstests mounts them with
# `mount -t fuse.jbdfs` (mount.fuse3 runs `jbdfs`, with a PATH that mount(8)
# has reset; a root mount allows other users). So /usr/local/bin/jbdfs must
# be this build's: when it is missing the script links it to target/release
# for the run. umount(8) must find /sbin/umount.fuse.jbdfs to wait for the
# daemon: when it is missing the script installs it for the run. Both are
# removed when the last run that uses them ends; another jbdfs in
# /usr/local/bin is refused.
# Loop devices are the default, as for ext3: the 13 quick tests that want
# SCRATCH_DEV to be a block device, or 512-byte sectors below the block
# size, then run on jbdfs too (6 of them pass), and the quick sample gives
# the same results as on image files (docs/FSTESTS.md, 2026-12-06).
# ext3: FSTYP=ext3, TEST_DEV and SCRATCH_DEV are loop devices over image
# files.
#
# The whole run is in its own mount namespace (unshare -m, a slave of the
# host's, other jobs' FUSE mounts detached from it), so that nothing else on
# the machine touches its mounts nor hangs it. Each test runs in its own
# `./check TEST` (under `timeout`). After it, the
# script unmounts whatever is still mounted, waits until no process holds the
# images or their loop devices (the daemons have exited), and runs
# `e2fsck -fn` on both (through the loop devices, if any). An
# unclean image, a daemon that does not exit within 60 s, or a test past
# --timeout is a failure of that test (the image is then made afresh for the
# next test). fstests runs no fsck of its own for fuse.
#
# Prints a table (pass / fail / not run per target: ext3, jbdfs-dev_fuse,
# jbdfs-io_uring), every test whose results differ, and the results
# directory, which keeps for each failure its .out.bad, the diff against the
# golden output, the .full log and the e2fsck output. Exits non-zero when
# jbdfs fails a test ext3 passed in the same run (or any test, with
# --no-ext3) that is not a known failure, when an image is unclean, or when a
# test or daemon hangs.
# Needs root, /dev/fuse (jbdfs) and loop devices (ext3; jbdfs falls back to
# files without them, above): when one is missing it skips loudly (exit 0),
# or fails with CI set. See docs/FSTESTS.md.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/lib-mount.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-mount.sh"

args=("$@")
groups=()
tests=()
quick_sample=0
transport=dev_fuse
devices=loop
devices_given=0
run_ext3=1
run_jbdfs=1
exclude_file="$JBDFS_ROOT/scripts/fstests.exclude"
declare -A KNOWN=()
timeout_s=600
size=4G
results=""
while [ $# -gt 0 ]; do
    case "$1" in
        -g) groups+=("$2"); shift ;;
        --quick-sample) quick_sample=1 ;;
        --transport) transport="$2"; shift ;;
        --devices) devices="$2"; devices_given=1; shift ;;
        --no-ext3) run_ext3=0 ;;
        --no-jbdfs) run_jbdfs=0 ;;
        --exclude) exclude_file="$2"; shift ;;
        --known-failures)
            case "$2" in *=*) ;; *) die "--known-failures wants TEST=REASON, not '$2'" ;; esac
            KNOWN[${2%%=*}]="${2#*=}"; shift ;;
        --timeout) timeout_s="$2"; shift ;;
        --size) size="$2"; shift ;;
        --results) results="$2"; shift ;;
        --keep) MNT_KEEP=1 ;;
        -h | --help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
        -*) die "unknown argument: $1 (see --help)" ;;
        *) tests+=("$1") ;;
    esac
    shift
done
case "$timeout_s" in '' | *[!0-9]* | 0) die "--timeout wants seconds, not '$timeout_s'" ;; esac
transports=()
case "$transport" in
    dev_fuse | io_uring) transports=("$transport") ;;
    both) transports=(dev_fuse io_uring) ;;
    *) die "--transport takes dev_fuse, io_uring or both, not '$transport'" ;;
esac
[ "$run_jbdfs" -eq 1 ] || transports=()
case "$devices" in
    loop | file) ;;
    *) die "--devices takes loop or file, not '$devices'" ;;
esac
if [ "$quick_sample" -eq 0 ] && [ ${#groups[@]} -eq 0 ] && [ ${#tests[@]} -eq 0 ]; then
    die "say what to run: TEST..., -g GROUP or --quick-sample (see --help)"
fi

is_root || skip_or_fail "fstests needs root (it mounts, and runs tests as other users)"
# The run lives in its own mount namespace, a slave of the host's: its
# mounts are invisible outside, and the host's unmounts reach it (a private
# copy would keep other jobs' FUSE superblocks alive after they unmount,
# so that their daemons never hear of it). Outside processes that stat every
# mount point (df, fuser: another job on the machine) pin a FUSE mount while
# its daemon answers, and fstests' unmounts then fail with EBUSY now and
# then (1 in 60 unmounts on a loaded machine; 0 in 150 in a namespace). And
# the FUSE mounts of other jobs are detached from the namespace's copy of the
# table: one whose daemon has stopped answering hangs every `df` (fstests
# runs `df -T -P`), as one did here.
if [ -z "${JBDFS_FSTESTS_NS:-}" ]; then
    command -v unshare >/dev/null 2>&1 || skip_or_fail "unshare (util-linux) is missing"
    JBDFS_FSTESTS_NS=1 exec unshare --mount --propagation slave \
        bash "$JBDFS_ROOT/scripts/fstests.sh" "${args[@]}"
fi
while read -r dir; do
    timeout 10 umount -l -c "$(printf '%b' "$dir")" 2>/dev/null \
        || warn "cannot detach the FUSE mount $dir from this run's namespace"
done < <(awk '{ for (i = 7; $i != "-"; i++) ; if ($(i + 1) ~ /^fuse/) print $5 }' /proc/self/mountinfo)

# ---- cleanup: mounts, daemons, loop devices, enable_uring, the helper -------
LOOPS=()             # loop devices we attached
# Runs at once share /usr/local/bin/jbdfs and /sbin/umount.fuse.jbdfs: each
# run registers in SHARE_DIR, a run that installs one notes it there, and
# the last run out removes what was installed.
SHARE_DIR=/run/jbdfs-fstests
uring_was=""         # enable_uring's value before we turned it on
IMAGES=()            # every image and device of the run, for the daemon hunt below

# uring_on: make sure enable_uring is on, remembering what it was. Called
# before every io_uring test: the switch is the whole machine's, and another
# run may put it back meanwhile; what it put back is what we restore.
uring_on() {
    local now
    now="$(cat "$ENABLE_URING" 2>/dev/null)" || return 1
    [ "$now" != Y ] || return 0
    uring_was="$now"
    echo 1 >"$ENABLE_URING" 2>/dev/null && [ "$(cat "$ENABLE_URING")" = Y ] || return 1
    info "$ENABLE_URING was $uring_was, now Y for jbdfs-io_uring"
}

# uring_restore: put enable_uring back to what it was before uring_on.
uring_restore() {
    [ -n "$uring_was" ] || return 0
    if echo "$uring_was" >"$ENABLE_URING"; then
        info "$ENABLE_URING put back to $uring_was"
    else
        warn "cannot put $ENABLE_URING back to $uring_was"
    fi
    uring_was=""
}

# image_holders IMAGE: the pids of processes that have IMAGE open.
image_holders() {
    fuser "$1" 2>/dev/null | tr -s ' ' '\n' | grep -E '^[0-9]+$' || true
}

# fuse_abort DIR: abort the FUSE connection mounted on DIR, so that a hung
# daemon cannot keep the unmount or the test's processes waiting.
fuse_abort() {
    local minor
    minor="$(awk -v d="$1" '$5 == d { split($3, a, ":"); print a[2] }' /proc/self/mountinfo | tail -n 1)"
    if [ -n "$minor" ] && [ -e "/sys/fs/fuse/connections/$minor/abort" ]; then
        echo 1 >"/sys/fs/fuse/connections/$minor/abort" 2>/dev/null || true
    fi
}

# share_join / share_leave: register this run / unregister it and, when no
# other run is alive, remove what runs installed (install_for_run).
share_join() {
    mkdir -p "$SHARE_DIR"
    : >"$SHARE_DIR/run.$$"
}
share_leave() {
    local f
    rm -f "$SHARE_DIR/run.$$"
    for f in "$SHARE_DIR"/run.*; do
        [ -e "$f" ] && kill -0 "${f##*.}" 2>/dev/null && return 0
        rm -f "$f"
    done
    for f in "$SHARE_DIR"/installed.*; do
        [ -e "$f" ] || continue
        rm -f "$(cat "$f")" "$f"
    done
}

# install_for_run NAME PATH COMMAND...: run COMMAND to put PATH in place for
# the runs, and note it for share_leave.
install_for_run() {
    local name="$1" path="$2"
    shift 2
    "$@" || die "cannot install $path"
    printf '%s\n' "$path" >"$SHARE_DIR/installed.$name"
    info "installed $path for fstests runs (removed when the last one ends)"
}

cleanup() {
    local img pid dev
    set +e
    for dir in "${!_MNT_KIND[@]}"; do
        mountpoint -q "$dir" || continue
        warn "cleanup: unmounting $dir"
        if [ "${_MNT_KIND[$dir]}" = jbdfs ]; then
            JBDFS_UMOUNT_TIMEOUT=20 "$JBDFS_ROOT/scripts/umount.fuse.jbdfs" "$dir" 2>/dev/null \
                || { fuse_abort "$dir"; umount -l "$dir" 2>/dev/null; }
        else
            umount "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null
        fi
    done
    for img in "${IMAGES[@]}"; do
        for pid in $(image_holders "$img"); do
            warn "cleanup: process $pid still holds $img; killing it"
            kill -9 "$pid" 2>/dev/null
        done
    done
    # A read-only flag (generic/050's blockdev --setro, left by a test cut
    # short) outlives the detach and would make the device's next user
    # read-only.
    for dev in "${LOOPS[@]}"; do
        blockdev --setrw "$dev" 2>/dev/null
        losetup -d "$dev" 2>/dev/null
    done
    share_leave
    uring_restore
    mnt_cleanup
}
# stop_check: stop the running test (timeout passes the signal on to the
# test's process group).
check_pid=""
stop_check() {
    [ -z "$check_pid" ] || kill -TERM "$check_pid" 2>/dev/null || true
    [ -z "$check_pid" ] || wait "$check_pid" 2>/dev/null || true
}
trap cleanup EXIT
trap 'stop_check; exit 130' INT TERM HUP

# ---- fstests: unpack, patch, build once -------------------------------------
section "fstests"
# To build it (xfstests' README), then to run it: its awk scripts need gawk
# (mawk lacks asort: generic/062 fails), and some tests use fio, dbench,
# dump/restore and uuidgen.
need_debs autoconf automake libtool libtool-bin make gcc pkg-config xfsprogs xfslibs-dev \
    uuid-dev libattr1-dev libacl1-dev libaio-dev libgdbm-dev libgdbm-compat-dev liburing-dev \
    libcap-dev attr acl bc psmisc quota perl sqlite3 xfsdump e2fsprogs fuse3 \
    gawk fio dbench dump uuid-runtime indent
cache="${JBDFS_FSTESTS_DIR:-/tmp/jbdfs-fstests}"
if [ -n "${FSTESTS_SRC:-}" ]; then
    src="$(cd "$FSTESTS_SRC" && pwd -P)" || die "FSTESTS_SRC=$FSTESTS_SRC is not a directory"
else
    tarball="${JBDFS_FSTESTS_TARBALL:-$(shared_file fstests/xfstests-63a29724.tar.gz)}"
    src="$cache/$(basename "$tarball" .tar.gz)"
    [ -f "$src/check" ] || unpack_once "$tarball" xfstests "$src" check
fi
[ -f "$src/check" ] || die "$src is not an fstests tree (no check)"
# fstests knows FUSE mounts only as type "fuse": map fuse.jbdfs as it maps
# fuse.glusterfs (common/rc, _fs_type).
if ! grep -q 's/fuse.jbdfs/fuse/' "$src/common/rc"; then
    sed -i "s|-e 's/fuse.ceph-fuse/ceph-fuse/'|-e 's/fuse.ceph-fuse/ceph-fuse/' -e 's/fuse.jbdfs/fuse/'|" \
        "$src/common/rc"
    grep -q 's/fuse.jbdfs/fuse/' "$src/common/rc" || die "cannot patch _fs_type in $src/common/rc"
fi
# Before every test, check wipes a SCRATCH_DEV that is a block device
# (wipefs -a: _try_wipe_scratch_devs), and for fuse _scratch_mkfs makes
# nothing again (it only empties the mount): on a loop device every test
# would find no filesystem. Skipped for fuse, as it is for image files
# (test -b).
if ! grep -q 'jbdfs: fuse cannot mkfs' "$src/common/rc"; then
    # shellcheck disable=SC2016 # the $ are fstests' own
    sed -i '/^_try_wipe_scratch_devs()$/,/^}$/ s|^\ttest -x "\$WIPEFS_PROG" [|][|] return 0$|&\n\t# jbdfs: fuse cannot mkfs again (_scratch_mkfs), so never wipe it\n\t[ "$FSTYP" != fuse ] \|\| return 0|' \
        "$src/common/rc"
    grep -q 'jbdfs: fuse cannot mkfs' "$src/common/rc" || die "cannot patch _try_wipe_scratch_devs in $src/common/rc"
fi
if [ ! -f "$src/.jbdfs-built" ]; then
    info "building fstests in $src (make -j2; log $src/jbdfs-build.log)"
    (cd "$src" && make -j2) >"$src/jbdfs-build.log" 2>&1 \
        || { tail -n 30 "$src/jbdfs-build.log" >&2; die "building fstests failed (log: $src/jbdfs-build.log)"; }
    touch "$src/.jbdfs-built"
fi

# The users and group fstests switches to.
getent group fsgqa >/dev/null || groupadd fsgqa
for user in fsgqa fsgqa2 123456-fsgqa; do
    getent passwd "$user" >/dev/null && continue
    useradd -g fsgqa -m -s /bin/bash -c "fstests user" "$user"
    info "created the user $user"
done

# ---- the tests --------------------------------------------------------------
list=()
[ "$quick_sample" -eq 0 ] || mapfile -t list < <(sed 's/#.*//; /^[[:space:]]*$/d; s/[[:space:]]//g' \
    "$JBDFS_ROOT/scripts/fstests.quick-sample")
for group in "${groups[@]}"; do
    group="${group#generic/}"
    mapfile -t -O "${#list[@]}" list < <(awk -v g="$group" '
        /^#/ { next }
        { for (i = 2; i <= NF; i++) if ($i == g) { print "generic/" $1; next } }' \
        "$src/tests/generic/group.list")
done
list+=("${tests[@]}")
mapfile -t list < <(printf '%s\n' "${list[@]}" | awk 'NF && !seen[$0]++')
[ ${#list[@]} -gt 0 ] || die "no tests to run"
for t in "${list[@]}"; do
    [ -f "$src/tests/$t" ] || die "no test $t in $src/tests"
done
declare -A EXCLUDED=()
if [ -f "$exclude_file" ]; then
    while read -r t why; do
        why="${why#\#}"
        EXCLUDED[$t]="${why# }"
    done < <(sed -n 's/^\([a-z0-9]*\/[0-9]*\)[[:space:]]*\(#.*\)\{0,1\}$/\1 \2/p' "$exclude_file")
fi

# ---- the targets ------------------------------------------------------------
targets=()
[ "$run_ext3" -eq 0 ] || targets+=(ext3)
for t in "${transports[@]}"; do
    if [ "$t" = io_uring ]; then
        why=""
        if [ ! -w "$ENABLE_URING" ]; then
            why="$ENABLE_URING is missing or not writable (Linux 6.14+ with CONFIG_FUSE_IO_URING, as root)"
        elif ! uring_on; then
            why="writing 1 to $ENABLE_URING did not turn it on"
        fi
        uring_restore
        if [ -n "$why" ]; then
            [ -z "${CI:-}" ] || die "jbdfs over io_uring cannot run: $why (CI is set, so this is a failure)"
            printf '\n%s: jbdfs-io_uring NOT run: %s\n\n' "$(basename "$0")" "$why" >&2
            continue
        fi
    fi
    targets+=("jbdfs-$t")
done
[ ${#targets[@]} -gt 0 ] || skip_or_fail "no target can run"
if [ ${#transports[@]} -gt 0 ] && [ "$devices" = loop ] && ! have_loop; then
    why="no usable loop device (/dev/loop-control, losetup -f)"
    if [ -n "${CI:-}" ] || [ "$devices_given" -eq 1 ]; then
        die "--devices loop: $why"
    fi
    printf '\n%s: jbdfs on image FILES, not loop devices: %s\n\n' "$(basename "$0")" "$why" >&2
    devices="file"
fi

if [ ${#transports[@]} -gt 0 ]; then
    build_jbdfs
    # mount(8) drops PATH before mount.fuse3 runs `jbdfs`, so the shell's
    # default PATH is searched: /usr/local/bin must hold this build's jbdfs.
    daemon_bin=/usr/local/bin/jbdfs
    share_join
    if [ ! -e "$daemon_bin" ] && [ ! -L "$daemon_bin" ]; then
        install_for_run jbdfs "$daemon_bin" ln -s "$JBDFS_BIN_DIR/jbdfs" "$daemon_bin"
    elif ! cmp -s "$daemon_bin" "$JBDFS_BIN_DIR/jbdfs"; then
        die "$daemon_bin is another jbdfs than $JBDFS_BIN_DIR/jbdfs: mount -t fuse.jbdfs would run it (reinstall with scripts/install.sh, or remove it)"
    fi
    [ -e /sbin/umount.fuse.jbdfs ] || install_for_run umount-helper /sbin/umount.fuse.jbdfs \
        install -m 0755 "$JBDFS_ROOT/scripts/umount.fuse.jbdfs" /sbin/umount.fuse.jbdfs
fi

[ -n "$results" ] || results="$(mktemp -d "$JBDFS_WORKDIR/jbdfs-fstests-results.XXXXXX")"
mkdir -p "$results"
results="$(cd "$results" && pwd -P)"
info "results in $results"

# make_fs TARGET IMAGE_OR_DEV: a fresh ext3 filesystem for TARGET.
make_fs() {
    case "$1" in
        ext3) mke2fs -q -F -t ext3 "$2" >&2 ;;
        *) "$JBDFS_BIN_DIR/mkfs-jbdfs" -q -F "$2" "$size" >&2 ;;
    esac
}

# attach_loops: loop devices over TIMG and SIMG; sets TDEV and SDEV.
attach_loops() {
    TDEV="$(losetup -f --show "$TIMG")" || die "losetup $TIMG failed"
    LOOPS+=("$TDEV")
    SDEV="$(losetup -f --show "$SIMG")" || die "losetup $SIMG failed"
    LOOPS+=("$SDEV")
    # And one left read-only by someone else is made writable.
    blockdev --setrw "$TDEV" "$SDEV" || die "blockdev --setrw $TDEV $SDEV failed"
}

# setup TARGET: images, devices, mount points and fstests' config for
# TARGET; sets TDEV, SDEV (what fstests mounts), TIMG, SIMG, TDIR, SDIR, CONF.
setup() {
    local target="$1" dir="$results/$1" opts="" kind=jbdfs
    mkdir -p "$dir"
    TIMG="$(mktemp "$JBDFS_WORKDIR/jbdfs-fstests-$target-test.XXXXXX.img")"
    SIMG="$(mktemp "$JBDFS_WORKDIR/jbdfs-fstests-$target-scratch.XXXXXX.img")"
    _MNT_IMAGES+=("$TIMG" "$SIMG")
    IMAGES+=("$TIMG" "$SIMG")
    truncate -s "$size" "$TIMG" "$SIMG"
    new_mountpoint TDIR "fstests-$target-test"
    new_mountpoint SDIR "fstests-$target-scratch"
    if [ "$target" = ext3 ]; then
        kind=loop
        attach_loops
    else
        TDEV="$TIMG"
        SDEV="$SIMG"
        [ "$devices" = file ] || attach_loops
        IMAGES+=("$TDEV" "$SDEV")
        opts="$(transport_option "${target#jbdfs-}")"
    fi
    make_fs "$target" "$TDEV"
    make_fs "$target" "$SDEV"
    _MNT_KIND["$TDIR"]=$kind
    _MNT_KIND["$SDIR"]=$kind
    CONF="$dir/local.config"
    {
        echo "# fstests configuration for $target (scripts/fstests.sh)"
        [ "$target" = ext3 ] || echo "# jbdfs with --devices $devices (loop: loop devices over the images; file: the images)"
        echo "export TEST_DEV=$TDEV TEST_DIR=$TDIR SCRATCH_DEV=$SDEV SCRATCH_MNT=$SDIR"
        echo "export RESULT_BASE=$dir/results"
        if [ "$target" = ext3 ]; then
            echo "export FSTYP=ext3"
        else
            echo "export FSTYP=fuse FUSE_SUBTYP=.jbdfs"
            # The stats files' last line, written at each unmount, names
            # the transport that served the mount.
            echo "export TEST_FS_MOUNT_OPTS='-o $opts,stats=$dir/test.stats'"
            echo "export MOUNT_OPTIONS='-o $opts,stats=$dir/scratch.stats'"
        fi
    } >"$CONF"
}

# umount_retry DIR: unmount a jbdfs mount, waiting for its daemon (60 s at
# most); an EBUSY is tried again for 5 s (a test's last process may still
# be on its way out).
umount_retry() {
    local n
    for n in 1 2 3 4 5 6; do
        JBDFS_UMOUNT_TIMEOUT=60 umount "$1" && return 0
        mountpoint -q "$1" || return 1
        [ "$n" -lt 6 ] && sleep 1
    done
    return 1
}

# settle TARGET TEST LOG: after a test, unmount what is still mounted, wait
# until no process holds the images or their loop devices, and e2fsck -fn
# both. Prints "hung",
# "unclean" or nothing; an image found unclean is made afresh.
settle() {
    local target="$1" t="$2" log="$3" verdict="" dir img dev pid n out
    for dir in "$TDIR" "$SDIR"; do
        mountpoint -q "$dir" || continue
        echo "settle: $dir still mounted after the test; unmounting" >>"$log"
        if [ "$target" = ext3 ]; then
            umount "$dir" >>"$log" 2>&1 || { umount -l "$dir"; verdict=hung; }
        elif ! umount_retry "$dir" >>"$log" 2>&1; then
            echo "settle: umount $dir failed or timed out: aborting the connection" >>"$log"
            verdict=hung
            fuse_abort "$dir"
            umount -l "$dir" >>"$log" 2>&1 || true
        fi
    done
    for img in "$TDEV" "$SDEV"; do
        [ "$target" = ext3 ] && break
        for n in $(seq 1 600); do
            [ -n "$(image_holders "$img")" ] || break
            [ "$n" -lt 600 ] || {
                for pid in $(image_holders "$img"); do
                    echo "settle: process $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) still holds $img 60 s after the test; killing it" >>"$log"
                    kill -9 "$pid" 2>/dev/null || true
                done
                verdict=hung
            }
            sleep 0.1
        done
    done
    for dev in "$TDEV" "$SDEV"; do
        out="$(e2fsck -fn "$dev" 2>&1)" && continue
        # A test that asks for _require_scratch_nocheck damages the scratch
        # device on purpose: it is made afresh, and that is all.
        if [ "$dev" = "$SDEV" ] && grep -q '_require_scratch_nocheck' "$src/tests/$t"; then
            echo "settle: the scratch image is unclean after $t (_require_scratch_nocheck): made afresh" >>"$log"
            make_fs "$target" "$dev"
            continue
        fi
        [ "$verdict" = hung ] || verdict=unclean
        {
            echo "==== e2fsck -fn $dev (the $([ "$dev" = "$TDEV" ] && echo test || echo scratch) image) after $t"
            printf '%s\n' "$out"
        } >>"$results/$target/failures/${t//\//_}.e2fsck"
        make_fs "$target" "$dev"
    done
    printf '%s' "$verdict"
}

# keep_failure TARGET TEST: copy the test's .out.bad, its diff against the
# golden output, .full and .dmesg into the failures directory.
keep_failure() {
    local target="$1" t="$2" base="$results/$1/results/$2" keep
    keep="$results/$target/failures/${t//\//_}"
    for ext in out.bad full dmesg; do
        [ -f "$base.$ext" ] && cp "$base.$ext" "$keep.$ext"
    done
    if [ -f "$base.out.bad" ]; then
        diff -u "$src/tests/$t.out" "$base.out.bad" >"$keep.diff" || true
    fi
}

# run_target TARGET: every test on TARGET, one ./check each; results in
# $results/TARGET/status (TEST STATUS REASON).
run_target() {
    local target="$1" t t0 rc out status why verdict n=0 start=$SECONDS
    local status_file="$results/$target/status" log="$results/$target/check.log"
    section "$target: ${#list[@]} tests"
    [ "$target" != jbdfs-io_uring ] || uring_on || die "cannot turn $ENABLE_URING on"
    setup "$target"
    mkdir -p "$results/$target/failures"
    : >"$status_file"
    for t in "${list[@]}"; do
        n=$((n + 1))
        if [ "$target" != ext3 ] && [ -n "${EXCLUDED[$t]+x}" ]; then
            printf '%s excluded %s\n' "$t" "${EXCLUDED[$t]}" >>"$status_file"
            printf '[%d/%d] %-12s %s excluded: %s\n' "$n" "${#list[@]}" "$t" "$target" "${EXCLUDED[$t]}"
            continue
        fi
        echo "==== $t" >>"$log"
        [ "$target" != jbdfs-io_uring ] || uring_on || die "cannot turn $ENABLE_URING on"
        t0=$SECONDS
        rc=0
        # In the background, so that a signal reaches the trap at once (it
        # stops the test) rather than when the test ends.
        (cd "$src" && HOST_OPTIONS="$CONF" exec timeout -k 30 "$timeout_s" ./check "$t") \
            >"$results/$target/last.out" 2>&1 &
        check_pid=$!
        wait "$check_pid" || rc=$?
        check_pid=""
        out="$(cat "$results/$target/last.out")"
        printf '%s\n' "$out" >>"$log"
        why=""
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            status=hung
            why="past --timeout $timeout_s s"
        elif grep -q '^Not run:' <<<"$out"; then
            status=notrun
            why="$(sed -n "s|^${t}[[:space:]]*\[not run\] *||p" <<<"$out" | head -n 1)"
        elif grep -q '^Passed all 1 tests' <<<"$out"; then
            status=pass
        else
            status=fail
            why="$(grep -m 1 -E "^${t}[[:space:]]|^check: |failed to" <<<"$out" | sed "s|^${t}[[:space:]]*||" || true)"
            [ -n "$why" ] || why="check exited $rc"
        fi
        verdict="$(settle "$target" "$t" "$log")"
        case "$verdict" in
            hung) status=hung; why="${why:+$why; }a daemon or unmount hung" ;;
            unclean) status=fail; why="${why:+$why; }e2fsck -fn: image unclean" ;;
        esac
        if [ "$target" != ext3 ] && [ "$status" != notrun ]; then
            for f in test scratch; do
                [ -f "$results/$target/$f.stats" ] || continue
                check_transport "$results/$target/$f.stats" "${target#jbdfs-}" >/dev/null 2>&1 && continue
                status=fail
                why="${why:+$why; }the $f mount was not served over ${target#jbdfs-}"
            done
        fi
        [ "$status" = pass ] || [ "$status" = notrun ] || keep_failure "$target" "$t"
        printf '%s %s %s\n' "$t" "$status" "$why" >>"$status_file"
        printf '%s %d\n' "$t" $((SECONDS - t0)) >>"$results/$target/seconds-per-test"
        printf '[%d/%d] %-12s %s %s (%d s)%s\n' "$n" "${#list[@]}" "$t" "$target" "$status" \
            $((SECONDS - t0)) "${why:+: $why}"
    done
    echo "$((SECONDS - start))" >"$results/$target/seconds"
}

for target in "${targets[@]}"; do
    run_target "$target"
    [ "$target" != jbdfs-io_uring ] || uring_restore
done

# ---- the summary ------------------------------------------------------------
section "summary ($results)"
declare -A ST=() WHY=()
for target in "${targets[@]}"; do
    while read -r t status why; do
        ST[$target:$t]=$status
        WHY[$target:$t]="$why"
    done <"$results/$target/status"
done
{
    printf '%-16s %6s %6s %8s %6s %9s %8s\n' target pass fail "not run" hung excluded seconds
    for target in "${targets[@]}"; do
        declare -A count=([pass]=0 [fail]=0 [notrun]=0 [hung]=0 [excluded]=0)
        for t in "${list[@]}"; do
            count[${ST[$target:$t]}]=$((count[${ST[$target:$t]}] + 1))
        done
        printf '%-16s %6d %6d %8d %6d %9d %8d\n' "$target" "${count[pass]}" "${count[fail]}" \
            "${count[notrun]}" "${count[hung]}" "${count[excluded]}" "$(cat "$results/$target/seconds")"
        unset count
    done
} | tee "$results/summary.txt"

bad=0
{
    echo
    echo "tests whose results differ between targets, and every failure:"
    for t in "${list[@]}"; do
        line="" differ=0 failed=0 first=""
        for target in "${targets[@]}"; do
            s="${ST[$target:$t]}"
            line="$line $target=$s"
            [ -n "$first" ] || first="$s"
            [ "$s" = "$first" ] || differ=1
            case "$s" in fail | hung) failed=1 ;; esac
        done
        [ "$differ" -eq 1 ] || [ "$failed" -eq 1 ] || continue
        printf '  %-12s%s\n' "$t" "$line"
        for target in "${targets[@]}"; do
            [ -z "${WHY[$target:$t]}" ] || printf '      %s: %s\n' "$target" "${WHY[$target:$t]}"
        done
    done
} | tee -a "$results/summary.txt"

# The verdict: hangs and unclean images always count; a jbdfs failure
# counts unless ext3 failed it too or it is a known failure.
{
    echo
    for target in "${targets[@]}"; do
        for t in "${list[@]}"; do
            s="${ST[$target:$t]}"
            why="${WHY[$target:$t]}"
            if [ "$s" = hung ] || [[ "$why" == *"image unclean"* ]]; then
                echo "FAILED: $target $t: $why"
                bad=1
                continue
            fi
            [ "$target" != ext3 ] || continue
            if [ -n "${KNOWN[$t]+x}" ]; then
                [ "$s" = fail ] || echo "note: $t is a known failure (${KNOWN[$t]}) but is $s on $target: take it off the list"
                continue
            fi
            [ "$s" = fail ] || continue
            if [ "$run_ext3" -eq 0 ] || [ "${ST[ext3:$t]}" = pass ]; then
                echo "FAILED: $target $t fails${ST[ext3:$t]:+ where ext3 passes}: $why"
                bad=1
            fi
        done
    done
} | tee -a "$results/summary.txt"
grep -q '^FAILED:' "$results/summary.txt" && bad=1
echo
echo "fstests results: $results"
[ "$bad" -eq 0 ]
