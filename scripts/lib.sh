# shellcheck shell=bash
# Shared helpers for jbdfs's scripts. Source it, do not run it:
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# After sourcing, JBDFS_ROOT is the repository root (absolute), and the sbin
# directories are on PATH (mke2fs, e2fsck, losetup and mount.fuse3 live there,
# and a non-login root shell does not always have them).

JBDFS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
export JBDFS_ROOT

for _jbdfs_dir in /usr/local/sbin /usr/sbin /sbin; do
    case ":$PATH:" in
        *":$_jbdfs_dir:"*) ;;
        *) PATH="$PATH:$_jbdfs_dir" ;;
    esac
done
unset _jbdfs_dir
export PATH

# repo_root: print the repository root.
repo_root() {
    printf '%s\n' "$JBDFS_ROOT"
}

# section TITLE...: print a header that stands out in a long log.
section() {
    printf '\n==== %s ====\n' "$*"
}

# info / warn / die MESSAGE...: one-line messages on stderr, prefixed with the
# script's name; die exits 1.
info() {
    printf '%s: %s\n' "$(basename "$0")" "$*" >&2
}

warn() {
    printf '%s: warning: %s\n' "$(basename "$0")" "$*" >&2
}

die() {
    printf '%s: error: %s\n' "$(basename "$0")" "$*" >&2
    exit 1
}

# is_root: true when running as uid 0.
is_root() {
    [ "$(id -u)" -eq 0 ]
}

# need_root [WHAT]: exit with a message unless running as root.
need_root() {
    is_root || die "${1:-this} needs root (run it with sudo or as root)"
}

# have_loop: true when loop devices can be used here: /dev/loop-control
# exists and `losetup -f` finds a free loop device.
have_loop() {
    [ -e /dev/loop-control ] || return 1
    command -v losetup >/dev/null 2>&1 || return 1
    losetup -f >/dev/null 2>&1
}

# skip_or_fail MESSAGE: a missing prerequisite. With CI set that is a
# failure; otherwise the whole run is skipped (exit 0), loudly.
skip_or_fail() {
    if [ -n "${CI:-}" ]; then
        die "$* (CI is set, so this is a failure)"
    fi
    printf '\n%s: SKIPPED: %s\n\n' "$(basename "$0")" "$*" >&2
    exit 0
}

# shared_file NAME: print where the shared file NAME (e.g.
# fstests/xfstests-63a29724.tar.gz) is: ../shared beside the checkout, as the
# project's machines and CI lay it out, else /work/shared. It may not exist.
shared_file() {
    if [ -f "$JBDFS_ROOT/../shared/$1" ]; then
        printf '%s\n' "$JBDFS_ROOT/../shared/$1"
    else
        printf '%s\n' "/work/shared/$1"
    fi
}

# unpack_once TARBALL TOP DEST: unpack TARBALL, whose top directory is TOP,
# and move TOP to DEST, unless DEST exists already. MARK, a file inside TOP
# (e.g. tests/run_e2fsck), proves the tarball is the right one.
unpack_once() {
    local tarball="$1" top="$2" dest="$3" mark="$4" unpack
    [ -e "$dest" ] && return 0
    [ -f "$tarball" ] || skip_or_fail "$tarball is missing"
    mkdir -p "$(dirname "$dest")"
    unpack="$(mktemp -d "$(dirname "$dest")/unpack.XXXXXX")"
    info "unpacking $tarball into $dest"
    tar -xzf "$tarball" -C "$unpack" || { rm -rf "$unpack"; die "cannot unpack $tarball"; }
    [ -e "$unpack/$top/$mark" ] || { rm -rf "$unpack"; die "$tarball has no $top/$mark"; }
    [ -e "$dest" ] || mv "$unpack/$top" "$dest"
    rm -rf "$unpack"
}
