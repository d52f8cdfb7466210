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
