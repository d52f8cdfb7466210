# shellcheck shell=bash
# Helpers shared by the benchmark scripts (bench-fsmark.sh, bench-tree.sh,
# bench-afd.sh, ab.sh; bench-seqio.sh uses its transport, loop and NBD
# helpers). Source it after lib.sh and before lib-mount.sh
# (it tells lib-mount.sh where cargo put the binaries):
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   . "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
#   . "$(dirname "${BASH_SOURCE[0]}")/lib-mount.sh"
#
# Backing stores: "ram" and the emulated devices ("array", "sata") put the
# image in /dev/shm; "disk" puts it in $BENCH_DISK_DIR (default /var/tmp,
# on the machine's disk). Only ram and disk have Linux ext3 and fuse2fs
# references: the kernel cannot run on jbdfs's latency model. "nbd" puts
# the image in /dev/shm too, but jbdfs reaches it through nbdkit's file
# plugin on a Unix socket (its own NBD client: the same image as "ram",
# over NBD); "nbd-delay" adds nbdkit's delay filter, BENCH_NBD_DELAY on
# every read and write (a network round trip; flushes are not delayed).
#
# Transports: jbdfs and the FUSE floor run on /dev/fuse ("dev_fuse") or on
# FUSE over io_uring ("io_uring": jbdfs -o io_uring, fuse_floor --io-uring).
# A script given --transport calls bench_transport_setup, which turns the
# kernel's switch (/sys/module/fuse/parameters/enable_uring) on for the run
# and bench_cleanup puts the old value back; filesystem names then carry
# the transport ("jbdfs/dev_fuse", "floor/io_uring"). Without it (as in
# bench-afd.sh) every name stays plain ("jbdfs", "floor") and means /dev/fuse.
#
# Environment:
#   BENCH_DISK_DIR   directory on the disk for "disk" images (default /var/tmp)
#   BENCH_IMAGE_SIZE image size (default 2G; sparse)
#   BENCH_NBD_DELAY  nbdkit delay per read and write for "nbd-delay" (default 1ms)
#   BENCH_URING_Q_DEPTH  queue depth on io_uring: jbdfs -o io_uring_q_depth=N,
#                    fuse_floor --depth N (default: their own, 8)

# The binaries are where cargo puts them, honouring CARGO_TARGET_DIR.
JBDFS_BIN_DIR="${JBDFS_BIN_DIR:-${CARGO_TARGET_DIR:-$JBDFS_ROOT/target}/release}"
BENCH_DISK_DIR="${BENCH_DISK_DIR:-/var/tmp}"
BENCH_IMAGE_SIZE="${BENCH_IMAGE_SIZE:-2G}"
BENCH_NBD_DELAY="${BENCH_NBD_DELAY:-1ms}"
# nbdkit serving each image of an nbd device: image -> pid.
declare -A _NBD_PID=()
# The Python with matplotlib: Debian's, not a pyenv shim in front of it.
BENCH_PYTHON="${BENCH_PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}"

BENCH_URING_PARAM="${BENCH_URING_PARAM:-/sys/module/fuse/parameters/enable_uring}"
BENCH_URING_Q_DEPTH="${BENCH_URING_Q_DEPTH:-}"
BENCH_URING_SAVED=""     # enable_uring before this run, once we have written it
BENCH_TRANSPORTS=""      # what this run measures: dev_fuse, io_uring or both, in order
BENCH_TRANSPORT_NOTE=""  # why io_uring was left out, when it was
BENCH_CMDLINE=""

# bench_cmdline "$@": remember the exact command line (call it before the
# options are parsed) for bench_header.
bench_cmdline() {
    BENCH_CMDLINE="$(printf '%q ' "$0" "$@")"
    BENCH_CMDLINE="${BENCH_CMDLINE% }"
}

# bench_uring_state: enable_uring's value (Y or N), or "absent".
bench_uring_state() {
    cat "$BENCH_URING_PARAM" 2>/dev/null || printf 'absent\n'
}

# bench_uring_why_not: why enable_uring cannot be turned on by this run
# (nothing when it can, or already is).
bench_uring_why_not() {
    if [ ! -e "$BENCH_URING_PARAM" ]; then
        printf '%s does not exist (a kernel without FUSE over io_uring, or fuse not loaded)\n' "$BENCH_URING_PARAM"
    elif [ "$(bench_uring_state)" != Y ] && [ ! -w "$BENCH_URING_PARAM" ]; then
        printf '%s is N and not writable here (not root, or /sys read-only)\n' "$BENCH_URING_PARAM"
    fi
}

# bench_transport_default: the default --transport: both when io_uring can
# be switched on, else dev_fuse (with a note on stderr saying why).
bench_transport_default() {
    local why
    why="$(bench_uring_why_not)"
    if [ -z "$why" ]; then
        printf 'both\n'
    else
        info "note: measuring /dev/fuse only (--transport dev_fuse): $why"
        printf 'dev_fuse\n'
    fi
}

# bench_transport_setup dev_fuse|io_uring|both: set BENCH_TRANSPORTS. For
# io_uring, turn enable_uring on (bench_transport_restore puts the old value
# back: call bench_traps first). When that fails, io_uring alone is an
# error, and "both" goes on with /dev/fuse only, saying why: no result is
# ever labelled io_uring unless the kernel's switch is on.
bench_transport_setup() {
    local want="$1" why="" old
    case "$want" in
        dev_fuse) BENCH_TRANSPORTS=dev_fuse; return 0 ;;
        io_uring | both) ;;
        *) die "unknown transport '$want' (expected dev_fuse, io_uring or both)" ;;
    esac
    why="$(bench_uring_why_not)"
    if [ -z "$why" ]; then
        old="$(bench_uring_state)"
        if [ "$old" != Y ]; then
            BENCH_URING_SAVED="$old"
            if ! { printf '1\n' >"$BENCH_URING_PARAM"; } 2>/dev/null; then
                why="writing 1 to $BENCH_URING_PARAM failed"
            elif [ "$(bench_uring_state)" != Y ]; then
                why="$BENCH_URING_PARAM still reads $(bench_uring_state) after writing 1"
            else
                info "$BENCH_URING_PARAM: $old -> Y for this run (put back at exit)"
            fi
        fi
    fi
    if [ -n "$why" ]; then
        [ "$want" = io_uring ] && die "cannot measure FUSE over io_uring: $why"
        BENCH_TRANSPORT_NOTE="io_uring columns skipped: $why"
        warn "$BENCH_TRANSPORT_NOTE; measuring /dev/fuse only"
        BENCH_TRANSPORTS=dev_fuse
    elif [ "$want" = both ]; then
        BENCH_TRANSPORTS="dev_fuse io_uring"
    else
        BENCH_TRANSPORTS=io_uring
    fi
}

# bench_transport_restore: put enable_uring back as it was before the run.
bench_transport_restore() {
    [ -n "$BENCH_URING_SAVED" ] || return 0
    local v=0
    [ "$BENCH_URING_SAVED" = Y ] && v=1
    if [ "$(bench_uring_state)" != "$BENCH_URING_SAVED" ]; then
        if { printf '%s\n' "$v" >"$BENCH_URING_PARAM"; } 2>/dev/null; then
            info "$BENCH_URING_PARAM put back to $BENCH_URING_SAVED"
        else
            warn "could not put $BENCH_URING_PARAM back to $BENCH_URING_SAVED (it reads $(bench_uring_state))"
        fi
    fi
    BENCH_URING_SAVED=""
}

# bench_header TITLE: the report's header on stdout: the exact command line,
# the transports measured (and why io_uring is not, when it is not), the
# machine and the date.
bench_header() {
    section "$1"
    printf 'command: %s\n' "${BENCH_CMDLINE:-$0}"
    printf 'transport: %s' "${BENCH_TRANSPORTS// / and }"
    printf ' (enable_uring: %s' "$(bench_uring_state)"
    [ -n "$BENCH_URING_SAVED" ] && printf ', was %s, put back at exit' "$BENCH_URING_SAVED"
    case " $BENCH_TRANSPORTS " in
        *" io_uring "*) printf '; jbdfs -o io_uring%s, fuse_floor --io-uring%s' \
            "${BENCH_URING_Q_DEPTH:+,io_uring_q_depth=$BENCH_URING_Q_DEPTH}" \
            "${BENCH_URING_Q_DEPTH:+ --depth $BENCH_URING_Q_DEPTH}" ;;
    esac
    printf ')\n'
    [ -n "$BENCH_TRANSPORT_NOTE" ] && printf 'note: %s\n' "$BENCH_TRANSPORT_NOTE"
    printf 'machine: %s cores, %s, kernel %s; %s\n' "$(nproc)" \
        "$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)" \
        "$(uname -r)" "$(date -u '+%F %H:%M UTC')"
}

# bench_fs_base FS / bench_fs_transport FS: "jbdfs/io_uring" -> jbdfs, io_uring;
# a name without a transport is on /dev/fuse (or is a kernel filesystem).
bench_fs_base() { printf '%s\n' "${1%%/*}"; }
bench_fs_transport() {
    case "$1" in
        */*) printf '%s\n' "${1#*/}" ;;
        *) printf 'dev_fuse\n' ;;
    esac
}

# bench_with_transports FS...: each of jbdfs and floor once per transport of
# BENCH_TRANSPORTS (jbdfs/dev_fuse jbdfs/io_uring ...); other names, and
# every name when no transport was set up, as they are.
bench_with_transports() {
    local fs t
    for fs in "$@"; do
        case "$fs" in
            jbdfs | floor)
                if [ -n "$BENCH_TRANSPORTS" ]; then
                    for t in $BENCH_TRANSPORTS; do printf '%s/%s\n' "$fs" "$t"; done
                else
                    printf '%s\n' "$fs"
                fi
                ;;
            *) printf '%s\n' "$fs" ;;
        esac
    done
}

# bench_uring_opts: jbdfs's mount options for io_uring.
bench_uring_opts() {
    printf 'io_uring%s\n' "${BENCH_URING_Q_DEPTH:+,io_uring_q_depth=$BENCH_URING_Q_DEPTH}"
}

# bench_transport_opts TRANSPORT: jbdfs's mount options for it. Explicit
# both ways: by default jbdfs serves over io_uring whenever enable_uring is
# on, and the scripts turn it on for their io_uring columns.
bench_transport_opts() {
    case "$1" in
        io_uring) bench_uring_opts ;;
        *) printf 'noio_uring\n' ;;
    esac
}

# bench_file_size FILE: its size in bytes (0 when it does not exist).
bench_file_size() {
    stat -c %s "$1" 2>/dev/null || printf '0\n'
}

# bench_check_uring WHAT PID LOG FROM: after a mount on io_uring, make sure
# it really is on io_uring: the switch is still on, the daemon PID holds
# io_uring rings, and its log (from byte FROM on) reports no fallback to
# /dev/fuse. Otherwise die: a result labelled io_uring must be one.
bench_check_uring() {
    local what="$1" pid="$2" log="$3" from="$4" rings=0 fallback
    [ "$(bench_uring_state)" = Y ] \
        || die "$BENCH_URING_PARAM reads $(bench_uring_state) (turned off during the run?): refusing to measure $what as io_uring"
    for _ in $(seq 1 50); do
        rings="$(find "/proc/$pid/fd" -lname 'anon_inode:\[io_uring\]' 2>/dev/null | wc -l)"
        [ "$rings" -gt 0 ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    fallback="$(tail -c +"$((from + 1))" "$log" 2>/dev/null \
        | grep -iE 'fall(s|ing)?[ -]?back|(serving over|by) /dev/fuse|uring.*(error|fail|unavailable|unsupported|disabled|not granted)' \
        | head -n 3 || true)"
    if [ -n "$fallback" ]; then
        printf '%s\n' "$fallback" >&2
        die "$what logged the lines above: refusing to label it io_uring (log: $log)"
    fi
    [ "$rings" -gt 0 ] || die "$what (pid $pid) holds no io_uring ring: refusing to label it io_uring (log: $log)"
    info "$what: on io_uring ($rings rings)"
}

# bench_stats_transport STATS TRANSPORT: whether jbdfs's -o stats= file
# (written at unmount; its last line names the transport served, "transport:
# io_uring, ..." or "transport: /dev/fuse, ...") agrees with TRANSPORT. A
# build whose stats have no transport line passes for dev_fuse only.
bench_stats_transport() {
    local line
    line="$(grep '^transport:' "$1" 2>/dev/null | tail -n 1 || true)"
    case "$2:$line" in
        dev_fuse: | "dev_fuse:transport: /dev/fuse"* | "io_uring:transport: io_uring"*) return 0 ;;
    esac
    warn "the mount was to be served over $2, but $1 says: ${line:-no transport line}"
    return 1
}

# bench_loop_detach PATH...: detach any loop device whose backing file is
# PATH or lies under it (left by a lazy unmount or an interrupted run).
bench_loop_detach() {
    local dev back p
    command -v losetup >/dev/null 2>&1 || return 0
    [ $# -gt 0 ] || return 0
    while read -r dev back; do
        back="${back% (deleted)}"
        for p in "$@"; do
            [ -n "$p" ] || continue
            case "$back" in
                "$p" | "$p"/*)
                    losetup -d "$dev" 2>/dev/null && warn "cleanup: detached $dev ($back)"
                    break
                    ;;
            esac
        done
    done < <(losetup -l -n -O NAME,BACK-FILE 2>/dev/null)
}

# bench_cleanup: for `trap` (see bench_traps) in the scripts that use
# lib-mount.sh: unmount and remove what is left (mnt_cleanup), detach loop
# devices left on our images, put enable_uring back.
bench_cleanup() {
    local images=("${_MNT_IMAGES[@]}") dir pid
    # A daemon interrupted while starting: let it mount (or fail) first, so
    # that mnt_cleanup unmounts it instead of waiting for it and killing it.
    for dir in "${!_MNT_PID[@]}"; do
        pid="${_MNT_PID[$dir]}"
        for _ in $(seq 1 50); do
            mountpoint -q "$dir" && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    mnt_cleanup
    # Whatever is still mounted on our mount points (a daemon killed by
    # mnt_cleanup leaves its mount behind): unmount it lazily.
    for dir in "${_MNT_DIRS[@]}"; do
        if mountpoint -q "$dir"; then
            warn "cleanup: $dir still mounted; umount -l"
            umount -l "$dir" 2>/dev/null || true
            rmdir -- "$dir" 2>/dev/null || true
        fi
    done
    bench_loop_detach "${images[@]}"
    bench_nbd_stop_all
    # jbdfs's -o stats= files beside images (bench-fsmark.sh), left by an
    # interrupted run.
    if [ "$MNT_KEEP" != 1 ]; then
        for dir in "${images[@]}"; do rm -f -- "$dir.stats"; done
    fi
    bench_transport_restore
}

# bench_traps CLEANUP: run the function CLEANUP (bench_cleanup, or the
# script's own) at exit, including on Ctrl-C and SIGTERM.
bench_traps() {
    # shellcheck disable=SC2064 # expand CLEANUP now
    trap "$1" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# bench_workdir DEVICE: where the image for DEVICE goes.
bench_workdir() {
    case "$1" in
        disk) printf '%s\n' "$BENCH_DISK_DIR" ;;
        ram | array | sata | nbd | nbd-delay) printf '%s\n' /dev/shm ;;
        *) die "unknown device $1 (expected ram, disk, array, sata, nbd or nbd-delay)" ;;
    esac
}

# bench_devsim_opt DEVICE: the jbdfs mount option that emulates DEVICE
# (nothing for the real backing stores).
bench_devsim_opt() {
    case "$1" in
        array | sata) printf 'devsim=%s\n' "$1" ;;
        *) printf '\n' ;;
    esac
}

# bench_nbd_serve VAR DEVICE IMAGE LOG: serve IMAGE with nbdkit on a Unix
# socket beside it (with the delay filter for nbd-delay) and set VAR to
# the NBD URI jbdfs mounts; bench_nbd_stop IMAGE ends the server.
bench_nbd_serve() {
    local -n _uri="$1"
    local dev="$2" img="$3" log="$4" sock="$3.sock" filters=() params=()
    command -v nbdkit >/dev/null || die "the $dev device needs nbdkit (scripts/deps.sh installs it)"
    # Filters go before the plugin, their parameters after it.
    if [ "$dev" = nbd-delay ]; then
        filters=(--filter=delay)
        params=("delay-read=$BENCH_NBD_DELAY" "delay-write=$BENCH_NBD_DELAY")
    fi
    rm -f -- "$sock"
    nbdkit -f -U "$sock" "${filters[@]}" file "file=$img" "${params[@]}" >>"$log" 2>&1 &
    _NBD_PID["$img"]=$!
    for _ in $(seq 1 100); do
        [ -S "$sock" ] && break
        sleep 0.05
    done
    [ -S "$sock" ] || die "nbdkit did not start serving $img (log: $log)"
    _uri="nbd+unix:///?socket=$sock"
}

bench_nbd_stop() {
    local pid="${_NBD_PID[$1]:-}"
    [ -n "$pid" ] || return 0
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    unset "_NBD_PID[$1]"
    rm -f -- "$1.sock"
}

# bench_nbd_stop_all: end every nbdkit bench_nbd_serve started (cleanup).
bench_nbd_stop_all() {
    local img
    for img in "${!_NBD_PID[@]}"; do bench_nbd_stop "$img"; done
}

# bench_image VAR DEVICE MKFS: a fresh ext3 image for DEVICE, made by MKFS
# (mkfs-jbdfs or mke2fs), removed at cleanup.
bench_image() {
    local _saved="$JBDFS_WORKDIR"
    JBDFS_WORKDIR="$(bench_workdir "$2")"
    new_image "$1" 4096 "$BENCH_IMAGE_SIZE" "$3"
    JBDFS_WORKDIR="$_saved"
}

# bench_build_floor: build the FUSE floor (daemon/examples/fuse_floor.rs) unless
# JBDFS_NO_BUILD=1, and make sure it is there, for scripts given --floor.
bench_build_floor() {
    if [ "${JBDFS_NO_BUILD:-0}" != 1 ]; then
        (cd "$JBDFS_ROOT" && cargo build --quiet --release -p jbdfs-daemon --example fuse_floor) >&2 \
            || die "building daemon/examples/fuse_floor.rs failed"
    fi
    [ -x "$JBDFS_BIN_DIR/examples/fuse_floor" ] || die "$JBDFS_BIN_DIR/examples/fuse_floor not found"
}

# bench_mount FS DEVICE IMAGE DIR LOG DATA [JBDFS_OPTS]: mount IMAGE on DIR
# with jbdfs, Linux ext3 (loop) or fuse2fs, in data mode DATA; or mount the
# FUSE floor (daemon/examples/fuse_floor.rs: no storage at all) on DIR.
# jbdfs and floor may name their transport: jbdfs/io_uring, floor/dev_fuse.
bench_mount() {
    local fs dev="$2" img="$3" dir="$4" log="$5" data="$6" extra="${7:-}" opts transport from
    fs="$(bench_fs_base "$1")"
    transport="$(bench_fs_transport "$1")"
    from="$(bench_file_size "$log")"
    case "$transport" in
        dev_fuse) ;;
        io_uring) [ "$fs" = jbdfs ] || [ "$fs" = floor ] || die "$fs has no io_uring transport" ;;
        *) die "unknown transport in $1" ;;
    esac
    case "$fs" in
        jbdfs)
            opts="data=$data"
            [ -n "$(bench_devsim_opt "$dev")" ] && opts="$opts,$(bench_devsim_opt "$dev")"
            [ -n "$extra" ] && opts="$opts,$extra"
            opts="$opts,$(bench_transport_opts "${transport:-dev_fuse}")"
            local src="$img"
            case "$dev" in
                nbd | nbd-delay) bench_nbd_serve src "$dev" "$img" "$log" ;;
            esac
            mount_jbdfs "$src" "$dir" "$log" "$opts"
            ;;
        ext3)
            have_loop || die "no usable loop device for the Linux ext3 reference"
            mount -t ext3 -o "loop,data=$data" "$img" "$dir" || die "mount -o loop $img failed"
            _MNT_KIND["$dir"]=loop
            ;;
        floor)
            # No storage: the image is made and checked only so that every
            # filesystem runs the same steps.
            local fargs=("$dir")
            [ "$transport" = io_uring ] && fargs+=(--io-uring ${BENCH_URING_Q_DEPTH:+--depth "$BENCH_URING_Q_DEPTH"})
            "$JBDFS_BIN_DIR/examples/fuse_floor" "${fargs[@]}" >>"$log" 2>&1 &
            _MNT_KIND["$dir"]=floor
            _MNT_PID["$dir"]=$!
            for _ in $(seq 1 100); do
                mountpoint -q "$dir" && break
                kill -0 "${_MNT_PID[$dir]}" 2>/dev/null || break
                sleep 0.1
            done
            mountpoint -q "$dir" || { tail -n 5 "$log" >&2; die "fuse_floor ${fargs[*]} did not mount (log: $log)"; }
            ;;
        fuse2fs)
            # fuse2fs daemonizes; it does not write its journal.
            fuse2fs "$img" "$dir" >>"$log" 2>&1 || die "fuse2fs $img failed (log: $log)"
            _MNT_KIND["$dir"]=fuse2fs
            ;;
        *) die "unknown filesystem $fs" ;;
    esac
    [ "$transport" = io_uring ] && bench_check_uring "$1 on $dir" "${_MNT_PID[$dir]}" "$log" "$from"
    return 0
}

# bench_umount FS DIR IMAGE LOG: unmount, wait for a FUSE daemon to let go
# of the image, and e2fsck -fn it. Returns e2fsck's status.
bench_umount() {
    local fs dir="$2" img="$3" log="$4"
    fs="$(bench_fs_base "$1")"
    case "$fs" in
        jbdfs)
            umount_jbdfs "$dir" || warn "unmounting jbdfs from $dir failed"
            bench_nbd_stop "$img"
            ;;
        ext3) umount_ext3 "$dir" ;;
        floor)
            fusermount3 -u "$dir" || umount "$dir" || warn "unmounting fuse_floor from $dir failed"
            wait "${_MNT_PID[$dir]}" 2>/dev/null || true
            unset "_MNT_KIND[$dir]" "_MNT_PID[$dir]"
            ;;
        fuse2fs)
            umount "$dir" || warn "unmounting fuse2fs from $dir failed"
            unset "_MNT_KIND[$dir]"
            # fuse2fs writes the image back after the unmount returns. fuser
            # reads every process's /proc entries, and blocks on one stuck
            # in another FUSE mount that hangs: each look is bounded, and the
            # wait is 10 s in all.
            local end=$((SECONDS + 10)) rc
            while [ "$SECONDS" -lt "$end" ]; do
                rc=0
                timeout -k 1 2 fuser -s "$img" 2>/dev/null || rc=$?
                [ "$rc" -eq 1 ] && break
                sleep 0.1
            done
            ;;
    esac
    check_image "$img" "$log"
}

# bench_fs_list DEVICE "REFS": the filesystems to run on DEVICE: jbdfs, and
# the references in REFS (ext3, fuse2fs, floor) where they can run (ram,
# disk); jbdfs and floor once per transport (bench_with_transports).
bench_fs_list() {
    local refs=""
    case "$1" in
        ram | disk) refs="$2" ;;
    esac
    # shellcheck disable=SC2086 # REFS is a list
    bench_with_transports jbdfs $refs | paste -sd ' '
}

# bench_workload "REFS" DATA OPTS RESULTS LOG REPEAT "DEVICES" CMD...: for
# each device, repeat and filesystem (jbdfs, and the references in REFS
# where they run): a fresh image, mounted in data mode DATA (jbdfs
# also with OPTS), `CMD... MOUNTPOINT`, whose TSV lines are appended to
# RESULTS prefixed with the filesystem and device, then unmount and
# e2fsck -fn. Runs that fail e2fsck are listed in BENCH_FSCK_FAILED.
BENCH_FSCK_FAILED=()
bench_workload() {
    local refs="$1" data="$2" opts="$3" results="$4" log="$5" repeat="$6" devices="$7"
    shift 7
    local dev fs how r img="" mnt=""
    for dev in $devices; do
        for r in $(seq 1 "$repeat"); do
            for fs in $(bench_fs_list "$dev" "$refs"); do
                how=mke2fs
                [ "$(bench_fs_base "$fs")" = jbdfs ] && how=mkfs-jbdfs
                bench_image img "$dev" "$how"
                new_mountpoint mnt jbdfs-bench
                bench_mount "$fs" "$dev" "$img" "$mnt" "$log" "$data" "$opts"
                info "$fs on $dev, run $r: $(basename "$1") ${*:2}"
                "$@" "$mnt" | awk -v fs="$fs" -v dev="$dev" '{ print fs "\t" dev "\t" $0; fflush() }' \
                    | tee -a "$results" >&2
                bench_umount "$fs" "$mnt" "$img" "$log" || BENCH_FSCK_FAILED+=("$fs on $dev, run $r")
                rm -f "$img"
            done
        done
    done
}

# bench_fsck_summary [FAILED...]: after a run, say whether every image was
# clean for e2fsck -fn; return 1 if any was not.
bench_fsck_summary() {
    if [ $# -eq 0 ]; then
        printf '\ne2fsck -fn after every run: clean\n'
        return 0
    fi
    printf '\ne2fsck -fn found errors after %d run(s):\n' $#
    printf -- '- %s\n' "$@"
    return 1
}

# bench_drop_caches: write back and drop the kernel's caches.
bench_drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
}
