#!/bin/sh
# Run a command inside a test root, as root, with the repository mounted read-only at /src.
#
#   unshare --mount --pid --fork --kill-child --propagation private \
#       tests/debian_roots/enter-root.sh ROOT REPO COMMAND...
#
# tests/debian_roots/trixie.py calls it that way: the mounts below live in a private mount namespace
# and end with it, and every process a test leaves behind dies with the PID namespace.  ROOT (the
# cached tree) is never written: an overlay with a throw-away upper layer on a tmpfs takes the
# writes (a test that writes under /etc, a mount point, /var).  The network namespace is the
# host's, so the tests can make veth pairs and `ip netns` namespaces as they do on the host.
#
# Two optional variables, for a root that is a user's machine (tests/debian_roots/clean_install.py):
#   SCANGUARD_ROOT_BINDS    space-separated HOST:GUEST pairs bind-mounted writable (a cache of
#                           downloaded .debs, a folder for results)
#   SCANGUARD_ROOT_NETWORK  1: copy the host's resolv.conf and hosts in, so apt reaches the mirror
set -eu

root=$1
repo=$2
shift 2
[ "$$" = 1 ] || { echo "enter-root.sh: run me through 'unshare --pid --fork' (see the header)" >&2; exit 2; }

scratch=$(mktemp -d /tmp/scanguard-root.XXXXXX)
trap 'cd /; umount -R "$scratch" 2>/dev/null; rmdir "$scratch" 2>/dev/null || true' EXIT
mount -t tmpfs -o mode=0755 scanguard-root "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/merged"
mount -t overlay overlay -o "lowerdir=$root,upperdir=$scratch/upper,workdir=$scratch/work" \
    "$scratch/merged"
new=$scratch/merged

mount -t proc proc "$new/proc"                 # this PID namespace's processes
mount --rbind /sys "$new/sys"                  # `ip netns exec` remounts its own sysfs
mount --rbind /dev "$new/dev"                  # includes /dev/pts, /dev/shm
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$new/run"
mkdir -m 1777 -p "$new/run/lock"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$new/tmp"
mkdir -p "$new/src"
mount --bind "$repo" "$new/src"
mount -o remount,bind,ro "$new/src"
for pair in ${SCANGUARD_ROOT_BINDS:-}; do
    mkdir -p "$new${pair#*:}"
    mount --bind "${pair%%:*}" "$new${pair#*:}"
done
if [ "${SCANGUARD_ROOT_NETWORK:-0}" = 1 ]; then
    rm -f "$new/etc/resolv.conf"
    cp -L /etc/resolv.conf /etc/hosts "$new/etc/"
fi
[ -e "$new/etc/resolv.conf" ] || : > "$new/etc/resolv.conf"

# A clean environment: the host's PATH may name a python3 that is not the root's.  Variables a
# test needs are passed in COMMAND (`env NAME=VALUE ...`).  Not exec: the
# trap above must still remove the scratch directory.
rc=0
chroot "$new" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" PYTHONDONTWRITEBYTECODE=1 \
    /bin/sh -c 'cd /src && exec "$@"' sh "$@" || rc=$?
exit $rc
