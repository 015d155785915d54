#!/usr/bin/env bash
# Builds the pure cgroup v2 test VM from Debian's packages only, as root:
#
#   OUT/vmlinux     the stock Debian kernel (linux-image-amd64), uncompressed:
#                   qemu boots its ELF through PVH, seconds faster under TCG
#                   than letting the bzImage decompress itself
#   OUT/initrd.cpio busybox-static and the virtio/ext4 modules the stock
#                   kernel has as modules; its /init mounts the two disks
#   OUT/root.img    ext4 image of a minimal Debian 12 (debootstrap) with what
#                   the tests need at run time, the kernel's modules, and the
#                   users root, nobody and moat (uid 1000)
#
# Usage: build-image.sh OUT [--force]
# The result is cached: OUT/stamp holds a hash of this script and of
# initramfs-init; nothing is rebuilt while they are unchanged.
# Needs: debootstrap, e2fsprogs (mkfs.ext4 -d), cpio, kmod (depmod), xz-utils,
# and apt configured for Debian 12 (the mirror is read from apt's sources).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-image.sh OUT [--force]}
force=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)

stamp=$(cat "$here/build-image.sh" "$here/initramfs-init" | sha256sum | cut -c1-16)
if [ "$force" != --force ] && [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] &&
  [ -f "$out/root.img" ] && [ -f "$out/vmlinux" ] && [ -f "$out/initrd.cpio" ]; then
  echo "vm-image: cached ($out, $stamp)"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "vm-image: building the image needs root (debootstrap)" >&2; exit 1; }
for tool in debootstrap mkfs.ext4 cpio depmod xz apt-get; do
  command -v "$tool" >/dev/null || { echo "vm-image: $tool not found (see .ci/vm/README.md)" >&2; exit 1; }
done

t0=$(date +%s)
work="$out/build"
rm -rf "$work" "$out/stamp"
mkdir -p "$work"

# The Debian mirror apt already uses on this machine (deb822 or one-line
# format), unless MOAT_VM_MIRROR names one.
mirror=${MOAT_VM_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ && u !~ /security/ {print u; exit}')
fi
if [ -z "$mirror" ]; then
  mirror=$(grep -hE '^deb +[^ ]+ +bookworm +' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '{print $2; exit}')
fi
[ -n "$mirror" ] || { echo "vm-image: no Debian 12 mirror in apt's sources; set MOAT_VM_MIRROR" >&2; exit 1; }

# 1. The stock kernel and busybox, from the packages apt resolves now.
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$kpkg" ]; then
  apt-get update -qq
  kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
[ -n "$kpkg" ] || { echo "vm-image: cannot resolve linux-image-amd64" >&2; exit 1; }
echo "vm-image: kernel package $kpkg, busybox-static"
(cd "$work" && apt-get download -q "$kpkg" busybox-static 2>&1 | grep -v -e '^W: Download is performed unsandboxed' -e '^Get:' -e '^Fetched' || true)
mkdir -p "$work/kernel" "$work/busybox"
dpkg-deb -x "$work"/linux-image-*.deb "$work/kernel"
dpkg-deb -x "$work"/busybox-static_*.deb "$work/busybox"
kver=$(ls "$work/kernel/lib/modules")
depmod -b "$work/kernel" "$kver"

# The bzImage holds the kernel as an xz stream; qemu boots the ELF inside
# directly (PVH entry, CONFIG_PVH=y in Debian's config).
vmlinuz="$work/kernel/boot/vmlinuz-$kver"
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1)
[ -n "$off" ] || { echo "vm-image: no xz stream in $vmlinuz" >&2; exit 1; }
tail -c +"$((off + 1))" "$vmlinuz" | xz -dc 2>/dev/null >"$work/vmlinux" || true
head -c 4 "$work/vmlinux" | grep -q ELF || { echo "vm-image: could not extract vmlinux" >&2; exit 1; }

# 2. The initramfs: busybox plus the modules (with their dependencies, in
# load order) that reach an ext4 root on virtio-blk, and virtio-rng, which
# feeds the guest's entropy from the host so that getrandom(2) does not
# block early in boot under TCG.
ird="$work/initrd"
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$work/busybox/bin/busybox" "$ird/bin/busybox"
cp "$here/initramfs-init" "$ird/init"
chmod 0755 "$ird/init" "$ird/bin/busybox"
declare -A seen=()
modorder=()
add_mod() { # add_mod PATH (relative to lib/modules/KVER), dependencies first
  local m=$1 dep
  [ -n "${seen[$m]:-}" ] && return
  seen[$m]=1
  for dep in $(awk -v m="$m:" '$1 == m {$1=""; print}' "$work/kernel/lib/modules/$kver/modules.dep"); do
    add_mod "$dep"
  done
  modorder+=("$m")
}
for name in virtio_pci virtio_blk crc32c_generic ext4 virtio-rng; do
  path=$(awk -F: -v n="/$name.ko" 'index($1, n) == length($1) - length(n) + 1 {print $1; exit}' \
    "$work/kernel/lib/modules/$kver/modules.dep")
  [ -n "$path" ] || { echo "vm-image: module $name not found" >&2; exit 1; }
  add_mod "$path"
done
for m in "${modorder[@]}"; do
  cp "$work/kernel/lib/modules/$kver/$m" "$ird/lib/modules/"
  basename "$m" >>"$ird/lib/modules/order"
done
(cd "$ird" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$work/initrd.cpio"
echo "vm-image: initramfs with ${#modorder[@]} modules: $(tr '\n' ' ' <"$ird/lib/modules/order")"

# 3. The root: minimal Debian 12 with the tests' run-time needs. (podman
# cannot be added to --include: its containers-common fails to configure
# inside debootstrap.)
root="$work/root"
echo "vm-image: debootstrap bookworm from $mirror"
debootstrap --variant=minbase \
  --include=libseccomp2,python3,nodejs,util-linux,procps,iproute2,kmod \
  bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -20 "$work/debootstrap.log" >&2; echo "vm-image: debootstrap failed" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale "$root"/usr/share/info
# The kernel's modules, for what the tests load on demand (veth, overlay, ...);
# hardware nobody emulates here is left out.
mkdir -p "$root/lib/modules"
cp -a "$work/kernel/lib/modules/$kver" "$root/lib/modules/"
for d in drivers/gpu drivers/media drivers/infiniband drivers/net/wireless drivers/staging \
  drivers/bluetooth drivers/iio drivers/hid drivers/usb drivers/scsi drivers/input sound; do
  rm -rf "$root/lib/modules/$kver/kernel/$d"
done
depmod -b "$root" "$kver"
# Users: root and nobody come with base-passwd; moat is the ordinary user.
grep -q '^moat:' "$root/etc/passwd" || {
  echo 'moat:x:1000:1000:moat test user:/home/moat:/bin/bash' >>"$root/etc/passwd"
  echo 'moat:x:1000:' >>"$root/etc/group"
  echo 'moat:*:19000:0:99999:7:::' >>"$root/etc/shadow"
}
mkdir -p "$root/home/moat" "$root/moat"
chown 1000:1000 "$root/home/moat"
echo moat-vm >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost moat-vm\n::1\tlocalhost\n' >"$root/etc/hosts"
: >"$root/etc/fstab"

size=$(($(du -sm "$root" | cut -f1) * 12 / 10 + 256))
mkfs.ext4 -q -F -L moat-root -d "$root" "$work/root.img" "${size}M"

mv "$work/vmlinux" "$out/vmlinux"
mv "$work/initrd.cpio" "$out/initrd.cpio"
mv "$work/root.img" "$out/root.img"
echo "$kver" >"$out/kernel-version"
rm -rf "$work"
echo "$stamp" >"$out/stamp"
echo "vm-image: built in $(($(date +%s) - t0)) s (kernel $kver, root ${size} MiB)"
