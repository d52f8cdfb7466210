#!/usr/bin/env bash
# Run the POSIX conformance suite pjdfstest (crates.io `pjdfstest` 0.2) inside
# a jbdfs mount, or with --linux on a loop-mounted Linux ext3 for a baseline.
#
#   scripts/pjdfstest.sh [OPTIONS] [-- PJDFSTEST-PATTERNS...]
#
#   --linux           run on Linux's own ext3 (mke2fs + mount -o loop) instead
#   --all-features    also enable the features rename_ctime, utime_now and
#                     utimensat (Linux ext3 passes those too; the default
#                     config enables posix_fallocate only, which is the
#                     baseline of 356 passed, 42 skipped)
#   --naptime SECS    pjdfstest's sleep between timestamp checks (default
#                     0.02; it must exceed the timestamp granularity, which
#                     for Linux is a jiffy: 0.001 fails on Linux ext3 too)
#   -b BYTES          image block size (default 4096)
#   --transport T     how the kernel reaches the daemon: dev_fuse (the
#                     default; -o noio_uring) or io_uring (-o io_uring;
#                     needs the kernel's enable_uring on). The mount's
#                     stats file must show that it was served so.
#   --mount-opts OPTS extra jbdfs -o options (none by default: a plain root
#                     mount, which allows other users, suid and devices)
#   --logs DIR        where logs go (default a new directory in $JBDFS_WORKDIR)
#   --keep            keep the image
#
# It installs pjdfstest if missing (cargo install --root $JBDFS_TOOLS_DIR,
# default ~/.cache/jbdfs-tools; needs libacl1-dev, installed with apt-get),
# creates the dummy users pjdfstest switches to (nobody and tests:tests),
# makes a 512 MiB image, mounts it, runs pjdfstest as root inside the mount,
# unmounts (scripts/umount.fuse.jbdfs for jbdfs) and runs `e2fsck -fn`.
# Prints every failure with its message, then
# `pjdfstest: N passed, F failed, S skipped`, and exits non-zero if a test
# failed, pjdfstest itself failed, the unmount or e2fsck failed, or the mount
# was not served over the --transport asked for.
# Needs root, and /dev/fuse (jbdfs) or loop devices (--linux).
# See docs/PJDFSTEST.md for the results and what the failures mean.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/lib-mount.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-mount.sh"

linux=0
all_features=0
naptime=0.02
bs=4096
transport=dev_fuse
transport_opt=""
mount_opts=""
logs=""
patterns=()
while [ $# -gt 0 ]; do
    case "$1" in
        --linux) linux=1 ;;
        --all-features) all_features=1 ;;
        --naptime) naptime="$2"; shift ;;
        -b) bs="$2"; shift ;;
        --transport) transport="$2"; shift ;;
        --mount-opts) mount_opts="$2"; shift ;;
        --logs) logs="$2"; shift ;;
        --keep) MNT_KEEP=1 ;;
        -h | --help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
        --) shift; patterns=("$@"); break ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

need_root "pjdfstest.sh (pjdfstest must run as root, and it mounts)"
if [ "$linux" -eq 1 ]; then
    have_loop || die "--linux needs loop devices"
else
    [ -e /dev/fuse ] || die "/dev/fuse is missing"
    transport_opt="$(transport_option "$transport")"
fi
trap mnt_cleanup EXIT
trap 'exit 130' INT TERM HUP

section "tools and users"
if [ ! -x "$JBDFS_TOOLS_DIR/bin/pjdfstest" ]; then
    need_debs libacl1-dev # pjdfstest links against libacl
fi
pjdfstest="$(tool_install pjdfstest '^0.2')"
[ "$linux" -eq 1 ] || build_jbdfs

# pjdfstest switches to two dummy users, each with its own primary group.
getent passwd nobody >/dev/null || die "there is no user nobody"
nobody_group="$(id -gn nobody)"
if ! getent passwd tests >/dev/null; then
    getent group tests >/dev/null || groupadd tests
    useradd -g tests -d / -s /usr/sbin/nologin -c "Dummy user for pjdfstest" tests
    info "created the user tests:tests"
fi
[ "$(id -gn tests)" = tests ] || die "user tests must have the primary group tests"

[ -n "$logs" ] || logs="$(mktemp -d "$JBDFS_WORKDIR/jbdfs-pjdfstest-logs.XXXXXX")"
mkdir -p "$logs"
info "logs in $logs"

config="$logs/pjdfstest.toml"
{
    echo "# pjdfstest configuration (scripts/pjdfstest.sh)"
    echo "[features]"
    echo "posix_fallocate = {}"
    if [ "$all_features" -eq 1 ]; then
        echo "rename_ctime = {}"
        echo "utime_now = {}"
        echo "utimensat = {}"
    fi
    echo
    echo "[settings]"
    echo "naptime = $naptime"
    echo "allow_remount = false"
    echo
    echo "[dummy_auth]"
    echo "entries = ["
    echo "  [\"nobody\", \"$nobody_group\"],"
    echo "  [\"tests\", \"tests\"],"
    echo "]"
} >"$config"

# pjdfstest 0.2.2's create_path_max (every *::enametoolong_path test)
# underflows and panics with "capacity overflow" when
# (PATH_MAX - 1 - len(its base dir)) is a multiple of NAME_MAX/2 = 127. Its
# base dir is MOUNTPOINT/.tmpXXXXXX/.tmpXXXXXX (22 more bytes), so pick a
# mount point whose length avoids that.
mnt=""
img=""
# mountpoint_for_pjdfstest: make the mount point, setting mnt.
mountpoint_for_pjdfstest() {
    local pad=""
    while :; do
        new_mountpoint mnt "pjdfstest-mnt$pad"
        [ $(((4095 - ${#mnt} - 22) % 127)) -ne 0 ] && return
        rmdir "$mnt"
        pad="${pad}x"
    done
}

if [ "$linux" -eq 1 ]; then
    what="Linux ext3"
    new_image img "$bs" 512M mke2fs
else
    what="jbdfs over $transport"
    new_image img "$bs" 512M mkfs-jbdfs
fi
mountpoint_for_pjdfstest

section "pjdfstest on $what (${bs}-byte blocks, naptime $naptime) in $mnt"
if [ "$linux" -eq 1 ]; then
    mount_ext3 "$img" "$mnt"
else
    stats="$logs/stats"
    # A plain root mount: allow_other, suid and dev are what the daemon
    # gives root's mounts by default, as the kernel's ext3 behaves.
    opts="stats=$stats${transport_opt:+,$transport_opt}${mount_opts:+,$mount_opts}"
    mount_jbdfs "$img" "$mnt" "$logs/jbdfs.log" "$opts"
fi

rc=0
(cd "$mnt" && NO_COLOR=1 CLICOLOR=0 "$pjdfstest" -c "$config" -p "$mnt" "${patterns[@]}") \
    >"$logs/pjdfstest.raw.log" 2>&1 || rc=$?
sed 's/\x1b\[[0-9;]*m//g' "$logs/pjdfstest.raw.log" >"$logs/pjdfstest.log"

ok=1
section "unmount and e2fsck -fn"
if [ "$linux" -eq 1 ]; then
    umount_ext3 "$mnt" || { ok=0; warn "umount $mnt failed"; }
else
    umount_jbdfs "$mnt" || { ok=0; warn "unmounting jbdfs failed"; }
    if grep -q 'panicked' "$logs/jbdfs.log"; then
        ok=0
        grep -A3 'panicked' "$logs/jbdfs.log" >&2
        warn "jbdfs panicked (see $logs/jbdfs.log)"
    fi
    check_transport "$stats" "$transport" || ok=0
fi
check_image "$img" "$logs/e2fsck.log" || ok=0
[ "$ok" -eq 0 ] || info "e2fsck -fn: clean"

section "results"
# Test lines are "NAME   ok|FAILED|skipped", each failure or skip followed by
# tab-indented lines giving the reason (for a failure: the assertion message,
# then a backtrace).
awk '
    /^[^ \t].*[ \t]FAILED$/ { name = $1; getline msg; sub(/^\t/, "", msg); print "FAILED  " name ": " msg }
' "$logs/pjdfstest.log" | tee "$logs/failures.txt"
awk '
    /^[^ \t].*[ \t]skipped$/ { name = $1; getline msg; sub(/^\t/, "", msg); print name ": " msg }
' "$logs/pjdfstest.log" | sort >"$logs/skipped.txt"
info "skipped tests and why: $logs/skipped.txt"

summary="$(grep '^Summary:' "$logs/pjdfstest.log" | tail -n 1 || true)"
if [ -z "$summary" ]; then
    tail -n 30 "$logs/pjdfstest.log" >&2
    echo "pjdfstest: 0 passed, 1 failed, 0 skipped"
    die "pjdfstest did not finish (status $rc, log: $logs/pjdfstest.log)"
fi
count() { sed -n "s/.* \([0-9][0-9]*\) $1.*/\1/p" <<<"$summary"; }
failed="$(count failed)"
skipped="$(count skipped)"
passed="$(count passed)"
info "$summary"
info "logs in $logs"
echo "pjdfstest: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$rc" -eq 0 ] && [ "$ok" -eq 1 ]
