#!/usr/bin/env bash
# Build the Debian package of jbdfs with cargo-deb, and check that it
# installs and removes cleanly.
#
#   scripts/deb.sh                 build target/debian/jbdfs_VERSION_ARCH.deb
#   scripts/deb.sh --check         build, then dpkg -i it into a scratch root
#                                  (--instdir/--admindir: the machine's own
#                                  files are not touched), smoke-test mkfs -t,
#                                  mount -t, umount and fsck -t through the
#                                  installed paths, dpkg -r it and check that
#                                  nothing is left
#   scripts/deb.sh --check-system  the same check on the real system (dpkg -i,
#                                  then dpkg -P): for a CI machine of its own;
#                                  refused if a file of the package is already
#                                  there and not the package's
#   --no-build                     package what target/release already holds
#
# Then: sudo apt install ./target/debian/jbdfs_*.deb (or dpkg -i).
# Needs cargo-deb (cargo install cargo-deb); the checks need root and /dev/fuse.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$JBDFS_ROOT"

check=""
build=1
for a in "$@"; do
    case "$a" in
        --check) check=scratch ;;
        --check-system) check=system ;;
        --no-build) build=0 ;;
        -h | --help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) die "unknown argument: $a" ;;
    esac
done

command -v cargo-deb >/dev/null || die "cargo-deb is not installed: cargo install cargo-deb"
target="${CARGO_TARGET_DIR:-$JBDFS_ROOT/target}"
if [ "$build" -eq 1 ]; then
    section "cargo build --release (jbdfs, mkfs-jbdfs, fsck-jbdfs)"
    cargo build --release -p jbdfs-daemon -p mkfs-jbdfs -p fsck-jbdfs --bins
fi
man="$target/release/man"
rm -rf -- "$man"
mkdir -p "$man"
for bin in jbdfs mkfs-jbdfs fsck-jbdfs; do
    "$target/release/$bin" --generate-man "$man" >/dev/null
done
# -n: no name or time in the header, so the package is reproducible.
gzip -9nf "$man"/*.8
section "cargo deb"
# The checks take the quicker compression (the package is the same files).
fast=()
[ -z "$check" ] || fast=(--fast)
deb="$(cargo deb -p jbdfs-daemon --no-build "${fast[@]}" --output "$target/debian" 2>&1 | tail -1)"
[ -f "$deb" ] || die "cargo deb did not say where the package is: $deb"
info "built $deb"
dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
dpkg-deb --contents "$deb"
[ -n "$check" ] || exit 0

need_root "the package check"
scratch="$(mktemp -d)"
img="$scratch/img"
mnt="$scratch/mnt"
cleanup() {
    mountpoint -q "$mnt" 2>/dev/null && umount -l "$mnt"
    rm -rf -- "$scratch"
}
trap cleanup EXIT
mkdir -p "$mnt"

# Every file and directory the package holds, as installed paths.
mapfile -t files < <(dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./|/|; s|/$||' | grep -v '^/$' | grep -v '^$')
if [ "$check" = system ]; then
    root=""
    for f in "${files[@]}"; do
        [ -d "$f" ] && continue
        if [ -e "$f" ] && ! dpkg -S "$f" >/dev/null 2>&1; then
            die "$f is already there and is no package's: dpkg -r would remove it (scripts/install.sh --uninstall first)"
        fi
    done
    dpkg=(dpkg)
else
    root="$scratch/root"
    mkdir -p "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/info"
    touch "$root/var/lib/dpkg/status"
    # --force-script-chrootless: no maintainer scripts run outside the root.
    dpkg=(dpkg --instdir="$root" --admindir="$root/var/lib/dpkg" --force-depends
        --force-not-root --force-script-chrootless --log=/dev/null)
fi

section "dpkg -i"
"${dpkg[@]}" -i "$deb"
for f in usr/bin/jbdfs usr/sbin/mkfs.jbdfs usr/sbin/fsck.jbdfs usr/sbin/umount.fuse.jbdfs \
    usr/share/man/man8/jbdfs.8.gz usr/share/man/man8/mkfs.jbdfs.8.gz usr/share/man/man8/fsck.jbdfs.8.gz; do
    [ -f "$root/$f" ] || die "/$f was not installed"
done
zcat "$root/usr/share/man/man8/mkfs.jbdfs.8.gz" | grep -q '^\.TH' || die "mkfs.jbdfs.8.gz is no man page"

section "smoke test through the installed paths"
# mkfs(8), fsck(8) and mount.fuse3 find the tools on PATH after their own
# directories (/sbin first: on the real system, the package's).
export PATH="$root/usr/sbin:$root/usr/bin:$PATH"
for t in jbdfs mkfs.jbdfs fsck.jbdfs; do
    [ "$(command -v "$t")" = "$(realpath -m "$root/usr/$([ "$t" = jbdfs ] && echo bin || echo sbin)/$t")" ] ||
        die "$t is found at $(command -v "$t"), not the package's (another install comes first on PATH)"
done
mkfs -t jbdfs -q "$img" 64M
mount -t fuse.jbdfs "$img" "$mnt"
echo "installed" >"$mnt/file"
sync "$mnt/file"
umount "$mnt"
# umount waits through umount.fuse.jbdfs (the system's /sbin one in the
# scratch check); wait for the daemon anyway before fsck.
for _ in $(seq 500); do
    fuser -s "$img" 2>/dev/null || break
    sleep 0.02
done
# fsck(8) takes a jbdfs type from fstab (for an image file given by
# name, blkid's "ext3" wins): an fstab entry, as a user's would be.
printf '%s %s jbdfs defaults 0 2\n' "$img" "$mnt" >"$scratch/fstab"
out="$(FSTAB_FILE="$scratch/fstab" fsck -V -t jbdfs -f -n "$mnt" 2>&1)" || die "fsck -t jbdfs failed: $out"
printf '%s\n' "$out"
[[ "$out" == *"fsck.jbdfs (1)"* ]] || die "fsck -t jbdfs did not run fsck.jbdfs: $out"
e2fsck -fn "$img" >/dev/null 2>&1 || die "e2fsck -fn found the image unclean"
info "mkfs -t jbdfs, mount -t fuse.jbdfs, umount and fsck -t jbdfs -f worked"

section "dpkg -P (remove and purge)"
"${dpkg[@]}" -P jbdfs
left=()
for f in "${files[@]}"; do
    case "$f" in /usr | /usr/bin | /usr/sbin | /usr/share | /usr/share/man | /usr/share/man/man8 | /usr/share/doc) continue ;; esac
    [ -e "$root$f" ] && left+=("$f")
done
[ "${#left[@]}" -eq 0 ] || die "left behind after dpkg -P: ${left[*]}"
if "${dpkg[@]}" -s jbdfs >/dev/null 2>&1; then
    die "dpkg still lists jbdfs after dpkg -P"
fi
info "installed and removed cleanly"
