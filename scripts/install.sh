#!/usr/bin/env bash
# Build jbdfs in release mode and install its three binaries:
#
#   PREFIX/bin/jbdfs          the daemon; mount.fuse3 runs it for `mount -t fuse.jbdfs`
#   PREFIX/sbin/mkfs.jbdfs    so `mkfs -t jbdfs` finds it
#   PREFIX/sbin/fsck.jbdfs    so `fsck -t jbdfs` finds it
#   /sbin/umount.fuse.jbdfs   so `umount DIR` waits for the daemon to write back
#   PREFIX/share/man/man8/{jbdfs,mkfs.jbdfs,fsck.jbdfs}.8, written by each
#                             binary from its --help (BIN --generate-man DIR)
#
# Usage: scripts/install.sh [--prefix DIR] [--no-build] [--uninstall]
#   --prefix DIR   install under DIR (default /usr/local)
#   --no-build     install what target/release already holds (e.g. under sudo,
#                  where root may have no cargo)
#   --uninstall    remove the installed files instead
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$JBDFS_ROOT"

usage() {
    sed -n '2,13s/^# \{0,1\}//p' "$0"
}

prefix=/usr/local
build=1
uninstall=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix)
            [ $# -ge 2 ] || die "--prefix needs a directory"
            prefix="$2"
            shift 2
            ;;
        --prefix=*)
            prefix="${1#--prefix=}"
            shift
            ;;
        --no-build) build=0; shift ;;
        --uninstall) uninstall=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[ -n "$prefix" ] || die "--prefix must not be empty"

# source-in-target/release  installed-path
FILES=(
    "jbdfs      $prefix/bin/jbdfs"
    "mkfs-jbdfs $prefix/sbin/mkfs.jbdfs"
    "fsck-jbdfs $prefix/sbin/fsck.jbdfs"
)

# Each binary's man page, named as the binary is installed.
mandir="$prefix/share/man/man8"
PAGES=(jbdfs.8 mkfs.jbdfs.8 fsck.jbdfs.8)

# umount(8) looks for type helpers in /sbin only, whatever the prefix.
helper_dir="${JBDFS_UMOUNT_HELPER_DIR:-/sbin}"
helper="$helper_dir/umount.fuse.jbdfs"

if [ "$uninstall" -eq 1 ]; then
    if [ -e "$helper" ]; then
        rm -f -- "$helper"
        info "removed $helper"
    fi
    for entry in "${FILES[@]}"; do
        read -r _ dest <<<"$entry"
        if [ -e "$dest" ] || [ -L "$dest" ]; then
            rm -f -- "$dest"
            info "removed $dest"
        fi
    done
    for page in "${PAGES[@]}"; do
        if [ -e "$mandir/$page" ]; then
            rm -f -- "$mandir/$page"
            info "removed $mandir/$page"
        fi
    done
    exit 0
fi

if [ "$build" -eq 1 ]; then
    section "cargo build --release --workspace"
    cargo build --release --workspace
fi

section "installing under $prefix"
for entry in "${FILES[@]}"; do
    read -r src dest <<<"$entry"
    [ -x "target/release/$src" ] || die "target/release/$src is missing: build first (cargo build --release --workspace)"
    install -d -m 0755 "$(dirname "$dest")"
    install -m 0755 "target/release/$src" "$dest"
    info "installed $dest"
done
pages="$(mktemp -d)"
trap 'rm -rf -- "$pages"' EXIT
for entry in "${FILES[@]}"; do
    read -r src _ <<<"$entry"
    "target/release/$src" --generate-man "$pages" >/dev/null \
        || die "target/release/$src --generate-man failed"
done
install -d -m 0755 "$mandir"
for page in "${PAGES[@]}"; do
    [ -f "$pages/$page" ] || die "no man page $page was written"
    install -m 0644 "$pages/$page" "$mandir/$page"
    info "installed $mandir/$page"
done
install -d -m 0755 "$helper_dir"
install -m 0755 scripts/umount.fuse.jbdfs "$helper"
info "installed $helper (umount waits for the daemon to write the image back)"
