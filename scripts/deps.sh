#!/usr/bin/env bash
# Install what jbdfs's tests and demo need on a fresh Debian 12 machine.
#
# Idempotent and quiet when everything is present: each tool is checked with
# `command -v` (or `dpkg-query` for libraries), and `apt-get update` runs at
# most once, only when something is missing. A package that Debian does not
# have gives a warning, not a failure. Needs root to install; without root it
# only reports what is missing.
#
# Also ensures the Rust toolchain's rustfmt and clippy components, and tries
# to load the fuse and loop kernel modules (failures ignored: in a container
# the host decides).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export DEBIAN_FRONTEND=noninteractive

# Debian 12 package names, each with the commands that show it is installed.
# A package whose command list is "-" is checked with dpkg-query instead.
#   package        commands
PACKAGES="
fuse3          fusermount3 mount.fuse3
libfuse3-dev   -
pkg-config     pkg-config
e2fsprogs      mke2fs e2fsck debugfs dumpe2fs
acl            setfacl getfacl
attr           getfattr setfattr
xfsprogs       mkfs.xfs
fuse2fs        fuse2fs
fsmark         fs_mark
util-linux     blockdev setpriv fstrim
mount          mount losetup
kmod           modprobe
python3        python3
g++            g++
python3-matplotlib -
shellcheck     shellcheck
qemu-utils     qemu-nbd
nbdkit         nbdkit
nbd-server     nbd-server
libssl-dev     -
gnutls-bin     certtool psktool
"

pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# pkg_available PKG: true when apt knows a candidate version of PKG.
pkg_available() {
    local candidate
    candidate="$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }')"
    [ -n "$candidate" ] && [ "$candidate" != "(none)" ]
}

missing=()
while read -r pkg cmds; do
    [ -n "$pkg" ] || continue
    if [ "$cmds" = "-" ]; then
        pkg_installed "$pkg" || missing+=("$pkg")
        continue
    fi
    for cmd in $cmds; do
        if ! command -v "$cmd" >/dev/null 2>&1; then
            missing+=("$pkg")
            break
        fi
    done
done <<<"$PACKAGES"

if [ "${#missing[@]}" -gt 0 ]; then
    if ! is_root; then
        warn "missing Debian packages: ${missing[*]} (run scripts/deps.sh as root to install them)"
    elif ! command -v apt-get >/dev/null 2>&1; then
        warn "missing packages: ${missing[*]}, and there is no apt-get to install them"
    else
        log="$(mktemp)"
        trap 'rm -f "$log"' EXIT
        info "missing: ${missing[*]}; running apt-get update"
        if ! apt-get update -qq >"$log" 2>&1; then
            cat "$log" >&2
            die "apt-get update failed"
        fi
        install=()
        for pkg in "${missing[@]}"; do
            if pkg_available "$pkg"; then
                install+=("$pkg")
            else
                warn "Debian has no package '$pkg' here; skipping it (what needs it will be skipped or fail)"
            fi
        done
        if [ "${#install[@]}" -gt 0 ]; then
            info "installing: ${install[*]}"
            if ! apt-get install -y -qq --no-install-recommends "${install[@]}" >"$log" 2>&1; then
                cat "$log" >&2
                die "apt-get install ${install[*]} failed"
            fi
        fi
    fi
fi

# Kernel modules: FUSE for the daemon, loop for mounting images with Linux's
# own ext3. Only try when the device node is absent; ignore failures.
if is_root && command -v modprobe >/dev/null 2>&1; then
    [ -e /dev/fuse ] || modprobe -q fuse >/dev/null 2>&1 || true
    [ -e /dev/loop-control ] || modprobe -q loop >/dev/null 2>&1 || true
fi
[ -e /dev/fuse ] || warn "/dev/fuse is missing: FUSE mounts will not work here"

# Rust: cargo itself must come with the machine (Debian's is too old for
# rust-version 1.85); rustfmt and clippy are added through rustup if missing.
command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH: install a Rust toolchain (1.85 or newer) with rustup"
for comp in fmt clippy; do
    if ! cargo "$comp" --version >/dev/null 2>&1; then
        name="$comp"
        [ "$comp" = fmt ] && name=rustfmt
        if command -v rustup >/dev/null 2>&1 && rustup component add "$name" >/dev/null 2>&1 \
            && cargo "$comp" --version >/dev/null 2>&1; then
            info "installed rust component $name"
        else
            warn "cargo $comp is not available and rustup could not add '$name' (no network to the Rust dist server?)"
        fi
    fi
done
