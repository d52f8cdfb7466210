# shellcheck shell=bash
# Mount/unmount helpers shared by the conformance scripts (pjdfstest.sh,
# fsx.sh). Source it after lib.sh, do not run it:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   . "$(dirname "${BASH_SOURCE[0]}")/lib-mount.sh"
#   trap mnt_cleanup EXIT
#
# Every mount made through these helpers is remembered, and mnt_cleanup
# unmounts whatever is still mounted (jbdfs through scripts/umount.fuse.jbdfs,
# so that the daemon gets to write the image back), stops any daemon still
# alive, removes the mount-point directories it created and, unless
# MNT_KEEP=1, the images it made.
#
# Environment:
#   JBDFS_TOOLS_DIR   cargo install --root for the test tools
#                     (default: $HOME/.cache/jbdfs-tools)
#   JBDFS_WORKDIR     where images and mount points go (default: $TMPDIR or /tmp)
#   JBDFS_NO_BUILD=1  do not run `cargo build --release --workspace` first
#   JBDFS_BIN_DIR     where jbdfs and mkfs-jbdfs are (default: $JBDFS_ROOT/target/release)

JBDFS_TOOLS_DIR="${JBDFS_TOOLS_DIR:-${HOME:-/root}/.cache/jbdfs-tools}"
JBDFS_WORKDIR="${JBDFS_WORKDIR:-${TMPDIR:-/tmp}}"
JBDFS_BIN_DIR="${JBDFS_BIN_DIR:-$JBDFS_ROOT/target/release}"
MNT_KEEP="${MNT_KEEP:-0}"

# Bookkeeping for mnt_cleanup: parallel arrays indexed by mount point.
declare -A _MNT_KIND=()   # dir -> jbdfs | loop
declare -A _MNT_PID=()    # dir -> pid of a foreground jbdfs daemon
_MNT_DIRS=()              # mount-point directories we created
_MNT_IMAGES=()            # images we created

# tool_install NAME VERSION: make sure $JBDFS_TOOLS_DIR/bin/NAME exists,
# installing the crate NAME (version requirement VERSION, e.g. "^0.2") from
# crates.io with `cargo install --root` if it is missing. Prints the path.
tool_install() {
    local name="$1" version="$2" bin="$JBDFS_TOOLS_DIR/bin/$1"
    if [ ! -x "$bin" ]; then
        command -v cargo >/dev/null 2>&1 || die "cargo is needed to install $name"
        info "installing $name $version into $JBDFS_TOOLS_DIR (cargo install)"
        cargo install --quiet --locked --root "$JBDFS_TOOLS_DIR" --version "$version" "$name" >&2 \
            || die "cargo install $name failed"
    fi
    printf '%s\n' "$bin"
}

# need_debs PKG...: apt-get install the Debian packages that are missing
# (only as root on a dpkg system; otherwise just warn).
need_debs() {
    local missing=() p
    command -v dpkg-query >/dev/null 2>&1 || return 0
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    if is_root && command -v apt-get >/dev/null 2>&1; then
        info "installing ${missing[*]} (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 \
            || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2; } \
            || die "apt-get install ${missing[*]} failed"
    else
        warn "missing packages: ${missing[*]}"
    fi
}

# build_jbdfs: build the release binaries unless JBDFS_NO_BUILD=1, and check
# that jbdfs and mkfs-jbdfs are there.
build_jbdfs() {
    if [ "${JBDFS_NO_BUILD:-0}" != 1 ]; then
        info "cargo build --release --workspace"
        (cd "$JBDFS_ROOT" && cargo build --quiet --release --workspace) >&2 || die "build failed"
    fi
    [ -x "$JBDFS_BIN_DIR/jbdfs" ] || die "$JBDFS_BIN_DIR/jbdfs not found (build it, or set JBDFS_BIN_DIR)"
    [ -x "$JBDFS_BIN_DIR/mkfs-jbdfs" ] || die "$JBDFS_BIN_DIR/mkfs-jbdfs not found"
}

# new_image VAR BLOCKSIZE SIZE [mkfs-jbdfs|mke2fs]: make an ext3 image in
# $JBDFS_WORKDIR and set VAR to its path. It is removed by mnt_cleanup unless
# MNT_KEEP=1. (It sets a variable rather than printing, because a $(...)
# subshell could not record the image for mnt_cleanup.)
new_image() {
    local _var="$1" _bs="$2" _size="$3" _how="${4:-mkfs-jbdfs}" _img
    _img="$(mktemp "$JBDFS_WORKDIR/jbdfs-test.XXXXXX.img")"
    _MNT_IMAGES+=("$_img")
    case "$_how" in
        mkfs-jbdfs) "$JBDFS_BIN_DIR/mkfs-jbdfs" -q -F -b "$_bs" "$_img" "$_size" >&2 ;;
        mke2fs) mke2fs -q -F -t ext3 -b "$_bs" "$_img" "$_size" >&2 ;;
        *) die "new_image: unknown mkfs $_how" ;;
    esac || die "cannot make $_img with $_how"
    printf -v "$_var" '%s' "$_img"
}

# new_mountpoint VAR [PREFIX]: make an empty directory in $JBDFS_WORKDIR and
# set VAR to its path; mnt_cleanup removes it (rmdir) once unmounted.
new_mountpoint() {
    local _var="$1" _dir
    _dir="$(mktemp -d "$JBDFS_WORKDIR/${2:-jbdfs-mnt}.XXXXXX")"
    _MNT_DIRS+=("$_dir")
    printf -v "$_var" '%s' "$_dir"
}

# The kernel's switch for FUSE over io_uring (Y or N; root writes 1 or 0).
ENABLE_URING=/sys/module/fuse/parameters/enable_uring

# transport_option TRANSPORT: print the jbdfs -o option that serves over
# TRANSPORT: dev_fuse (noio_uring: the daemon's default is io_uring whenever
# enable_uring is on) or io_uring (io_uring). Dies on anything else, and on
# io_uring where enable_uring is not on: the daemon would only warn and
# serve over /dev/fuse, and the run would test the wrong thing.
transport_option() {
    case "$1" in
        dev_fuse) echo noio_uring ;;
        io_uring)
            [ "$(cat "$ENABLE_URING" 2>/dev/null)" = Y ] \
                || die "--transport io_uring, but $ENABLE_URING is $(cat "$ENABLE_URING" 2>/dev/null || echo missing) (as root: echo 1 > $ENABLE_URING)"
            echo io_uring ;;
        *) die "--transport takes dev_fuse or io_uring, not '$1'" ;;
    esac
}

# check_transport STATS TRANSPORT: the last line of a jbdfs -o stats=STATS
# file (written at unmount) says the mount was served over TRANSPORT.
check_transport() {
    local line
    line="$(tail -n 1 "$1" 2>/dev/null || true)"
    case "$2:$line" in
        "dev_fuse:transport: /dev/fuse"* | "io_uring:transport: io_uring"*)
            info "served over $2 ($line)"
            return 0 ;;
    esac
    warn "the mount was to be served over $2, but $1 ends: ${line:-(nothing)}"
    return 1
}

# mount_jbdfs IMAGE DIR LOG [OPTS]: start the jbdfs daemon in the foreground
# (in the background of this shell), its output going to LOG, and wait until
# DIR is a mount point (30 s at most).
mount_jbdfs() {
    local img="$1" dir="$2" log="$3" opts="${4:-}" pid args=()
    [ -n "$opts" ] && args=(-o "$opts")
    "$JBDFS_BIN_DIR/jbdfs" -f "$img" "$dir" "${args[@]}" >>"$log" 2>&1 &
    pid=$!
    _MNT_KIND["$dir"]=jbdfs
    _MNT_PID["$dir"]=$pid
    for _ in $(seq 1 300); do
        mountpoint -q "$dir" && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 20 "$log" >&2
    die "jbdfs did not mount $img on $dir (log: $log)"
}

# umount_jbdfs DIR: unmount with scripts/umount.fuse.jbdfs (which waits for the
# daemon to write the image back), then reap the daemon. Returns non-zero if
# the unmount fails or the daemon exits with an error.
umount_jbdfs() {
    local dir="$1" pid rc=0 drc=0
    pid="${_MNT_PID[$dir]:-}"
    "$JBDFS_ROOT/scripts/umount.fuse.jbdfs" "$dir" || rc=$?
    if [ -n "$pid" ]; then
        wait "$pid" || drc=$?
        [ "$drc" -eq 0 ] || warn "jbdfs daemon for $dir exited with status $drc"
    fi
    unset "_MNT_KIND[$dir]" "_MNT_PID[$dir]"
    [ "$rc" -eq 0 ] && [ "$drc" -eq 0 ]
}

# mount_ext3 IMAGE DIR: loop-mount IMAGE with Linux's own ext3 driver.
mount_ext3() {
    have_loop || die "no usable loop device"
    mount -t ext3 -o loop "$1" "$2" || die "mount -o loop $1 $2 failed"
    _MNT_KIND["$2"]=loop
}

# umount_ext3 DIR
umount_ext3() {
    umount "$1" || return $?
    unset "_MNT_KIND[$1]"
}

# check_image IMAGE LOG: e2fsck -fn IMAGE, output appended to LOG; on failure
# the output is also shown. Returns e2fsck's status.
check_image() {
    local out rc=0
    out="$(e2fsck -fn "$1" 2>&1)" || rc=$?
    printf '%s\n' "$out" >>"$2"
    if [ "$rc" -ne 0 ]; then
        printf '%s\n' "$out" >&2
        warn "e2fsck -fn $1 exited with status $rc"
    fi
    return "$rc"
}

# mnt_cleanup: undo everything above that is still in place. For `trap`.
mnt_cleanup() {
    local dir pid img
    for dir in "${!_MNT_KIND[@]}"; do
        if mountpoint -q "$dir"; then
            warn "cleanup: unmounting $dir"
            case "${_MNT_KIND[$dir]}" in
                jbdfs) "$JBDFS_ROOT/scripts/umount.fuse.jbdfs" "$dir" 2>/dev/null \
                           || umount -l "$dir" 2>/dev/null || true ;;
                *) umount "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null || true ;;
            esac
        fi
        pid="${_MNT_PID[$dir]:-}"
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            for _ in $(seq 1 100); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$pid" 2>/dev/null; then
                warn "cleanup: jbdfs daemon $pid still running; sending SIGTERM"
                kill "$pid" 2>/dev/null || true
            fi
        fi
    done
    for dir in "${_MNT_DIRS[@]}"; do
        mountpoint -q "$dir" || rmdir -- "$dir" 2>/dev/null || true
    done
    if [ "$MNT_KEEP" = 1 ]; then
        [ "${#_MNT_IMAGES[@]}" -gt 0 ] && info "kept images: ${_MNT_IMAGES[*]}"
    else
        for img in "${_MNT_IMAGES[@]}"; do rm -f -- "$img"; done
    fi
}
