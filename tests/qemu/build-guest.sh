#!/usr/bin/env bash
# Builds the Linux guest the QEMU end-to-end test boots (tests/e2e/agent/qemu_guest.rs), from
# Debian's packages only: the cloud kernel (the package linux-image-cloud-amd64 depends on,
# unpacked, not installed) and an initramfs of busybox-static that loads the virtio network
# modules, takes QEMU user networking's address, serves HTTP on port 80 and greets on port 22
# with an SSH banner (no SSH server: enough for a check that the guest's port 22 answers).
# The same kernel and initramfs also make a bootable disk image (GRUB, the console on the
# serial port), the base image of a disk-image boot.
#
# Needs: apt-get, dpkg-deb, cpio, gzip, busybox-static, grub-mkrescue
# (apt-get install busybox-static cpio grub-pc-bin xorriso mtools).
# Writes: $OUT (default target/qemu-guest): vmlinuz, initrd.img, disk.img, guest-version.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
OUT="${OUT:-$root/target/qemu-guest}"
work="$OUT/work"
rm -rf "$work"
mkdir -p "$work/deb" "$work/initramfs"

busybox="$(command -v busybox || true)"
if [ -z "$busybox" ] || ! file -L "$busybox" 2>/dev/null | grep -q 'statically linked'; then
    busybox=/bin/busybox
fi
[ -x "$busybox" ] || { echo "busybox-static is not installed (apt-get install busybox-static)" >&2; exit 1; }

# The kernel package the cloud meta-package points at, e.g. linux-image-6.1.0-57-cloud-amd64.
kpkg="$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
[ -n "$kpkg" ] || { echo "apt-cache knows no linux-image-cloud-amd64 (run apt-get update)" >&2; exit 1; }
(cd "$work/deb" && apt-get download "$kpkg" >/dev/null)
dpkg-deb -x "$work"/deb/*.deb "$work/kernel"
kver="${kpkg#linux-image-}"
cp "$work/kernel/boot/vmlinuz-$kver" "$OUT/vmlinuz"

# virtio networking is modular in the cloud kernel: these modules, in their dependency order
# (each module's depends= line), give the guest its eth0.
modules=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net)
ird="$work/initramfs"
mkdir -p "$ird"/{bin,sbin,proc,sys,dev,tmp,etc,www,lib/modules}
cp "$busybox" "$ird/bin/busybox"
for m in "${modules[@]}"; do
    f="$(find "$work/kernel/lib/modules/$kver" -name "$m.ko*" | head -n1)"
    [ -n "$f" ] || { echo "module $m is not in $kpkg" >&2; exit 1; }
    case "$f" in
        *.ko.xz) xz -dc "$f" >"$ird/lib/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$f" >"$ird/lib/modules/$m.ko" ;;
        *) cp "$f" "$ird/lib/modules/$m.ko" ;;
    esac
done

cat >"$ird/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
for m in ${modules[*]}; do insmod /lib/modules/\$m.ko; done
ip link set lo up
ip link set eth0 up
# QEMU user networking's defaults: the guest is 10.0.2.15/24 behind 10.0.2.2; on a bridge the
# kernel command line names them (fleetwire.ip=ADDRESS/PREFIX fleetwire.gw=GATEWAY).
address=10.0.2.15/24
gateway=10.0.2.2
for arg in \$(cat /proc/cmdline); do
    case "\$arg" in
        fleetwire.ip=*) address="\${arg#fleetwire.ip=}" ;;
        fleetwire.gw=*) gateway="\${arg#fleetwire.gw=}" ;;
    esac
done
ip addr add "\$address" dev eth0
ip route add default via "\$gateway"
# A word to the gateway, so that a host on a bridge learns the guest's address (its neighbour
# table is where the agent reads it).
ping -c 1 -W 2 "\$gateway" >/dev/null 2>&1 &
hostname fleetwire-guest
echo "fleetwire guest $kver" >/www/index.html
# 64 KiB to download, for counting bytes (tests/e2e/agent/qemu_bridge.rs).
head -c 65536 /dev/zero >/www/zero-64k
httpd -p 80 -h /www
# What an SSH server says first, on SSH's port, to every connection.
(while :; do echo "SSH-2.0-fleetwire-guest" | nc -l -p 22; done) &
echo "fleetwire-guest: serving http on \$address port 80"
exec sh -c 'while :; do sleep 3600; done'
INIT
chmod +x "$ird/init"
(cd "$ird" && find . | cpio -o -H newc --quiet | gzip -9) >"$OUT/initrd.img"
echo "$kver" >"$OUT/guest-version"

# The bootable disk: a hybrid ISO (GRUB in its MBR) that SeaBIOS boots from a virtio disk.
command -v grub-mkrescue >/dev/null || { echo "grub-mkrescue is not installed (apt-get install grub-pc-bin xorriso mtools)" >&2; exit 1; }
mkdir -p "$work/disk/boot/grub"
cp "$OUT/vmlinuz" "$OUT/initrd.img" "$work/disk/"
cat >"$work/disk/boot/grub/grub.cfg" <<GRUB
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=0
menuentry "fleetwire guest" {
  linux /vmlinuz console=ttyS0 quiet
  initrd /initrd.img
}
GRUB
grub-mkrescue -o "$OUT/disk.img" "$work/disk" 2>/dev/null
rm -rf "$work"
echo "guest written to $OUT: vmlinuz ($kver), initrd.img, disk.img"
