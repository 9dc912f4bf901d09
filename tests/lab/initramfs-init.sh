#!/bin/sh
# /init of the lab's initramfs (busybox sh). Mounts the host's / read-only over 9p, puts a tmpfs
# overlay on top so the guest can write, and switches to it. Then $labinit (tests/lab/guest-init.sh
# on the host, visible at the same path) becomes PID 1. Kernel command-line `key=value` words
# arrive here as environment variables: labinit, labmods, labrepo, labrepo9p.
/bin/busybox --install -s /bin
export PATH=/bin

fail() {
    echo "lab-initramfs: $*" >/dev/console
    sleep 1
    poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# The archive has no /dev/console node, so the kernel gave us no stdio: take the console now.
exec </dev/console >/dev/console 2>&1

for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci \
         netfs fscache 9pnet 9pnet_virtio 9p overlay; do
    # A module the kernel has built in, or folded into another (6.12: fscache in netfs), is
    # not in the archive (tests/lab/build.py): nothing to load.
    [ -e "/modules/$m.ko" ] || continue
    insmod "/modules/$m.ko" || fail "insmod $m failed"
done

# The virtio-9p device is probed asynchronously on some kernels: retry briefly.
i=0
until mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=262144,cache=loose host /host; do
    i=$((i + 1))
    [ $i -ge 50 ] && fail "cannot mount the host root over 9p"
    sleep 0.1
done
mount -t tmpfs -o mode=0755 rw /rw || fail "tmpfs"
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /newroot \
    || fail "overlay"

# A release's own root (SCANGUARD_LAB_RELEASE=trixie) lacks this checkout: the host shares it
# read-only (tag "repo"); it goes where the host has it, so every path stays the same.
if [ -n "$labrepo9p" ]; then
    mkdir -p "/newroot$labrepo" || fail "mkdir $labrepo"
    mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=262144,cache=loose repo \
        "/newroot$labrepo" || fail "cannot mount the checkout over 9p"
fi

# Trap 2 of LAB.md: moving /proc and /sys with busybox misbehaves; the next stage mounts fresh ones.
umount /proc /sys
[ -f "/newroot$labinit" ] || fail "no guest init at '$labinit'"
exec switch_root /newroot /bin/bash "$labinit"
