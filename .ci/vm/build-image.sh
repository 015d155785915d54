#!/usr/bin/env bash
# Builds the pure cgroup v2 test VM from Debian's packages only, as root, in
# one of two forms from the same kernel, initramfs and debootstrap root.
#
# The qemu VM of `make vm-test` (run.sh; guest-init.sh is its pid 1):
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
# The Vagrant box of `make vagrant-test` (vagrant-run.sh), with --box: the
# same root plus systemd as init, udev, systemd-networkd (DHCP on the libvirt
# network), sshd, sudo, rsync, dbus-user-session and the user vagrant (uid
# 1000) whose key pair is generated here, for this box only:
#
#   OUT/moat-debian12.box  a libvirt box: box.img (the root as qcow2, one
#                   ext4 file system, no partition table), metadata.json, and
#                   a Vagrantfile that boots vmlinux and initrd.cpio (inside
#                   the box too) by libvirt's direct kernel boot and logs in
#                   with vagrant_key; the initramfs hands over to systemd
#                   (moat.boot=systemd on the command line)
#   OUT/vagrant_key  the private key (also inside the box)
#
# Usage: build-image.sh OUT [--force] [--box]
# The result is cached: OUT/stamp holds a hash of this script, of
# initramfs-init (and with --box of box-Vagrantfile) and of the form; nothing
# is rebuilt while they are unchanged.
# Needs: debootstrap, e2fsprogs (mkfs.ext4 -d), cpio, kmod (depmod), xz-utils,
# with --box also qemu-utils (qemu-img) and openssh-client (ssh-keygen), and
# apt configured for Debian 12 (the mirror is read from apt's sources).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-image.sh OUT [--force] [--box]}
shift
force= form=vm
for a in "$@"; do
  case $a in
    --force) force=1 ;;
    --box) form=box ;;
    *) echo "usage: build-image.sh OUT [--force] [--box]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

inputs=("$here/build-image.sh" "$here/initramfs-init")
products=(root.img vmlinux initrd.cpio)
tools=(debootstrap mkfs.ext4 cpio depmod xz apt-get)
if [ "$form" = box ]; then
  inputs+=("$here/box-Vagrantfile")
  products=(moat-debian12.box vagrant_key)
  tools+=(qemu-img ssh-keygen tar)
fi
stamp=$({ cat "${inputs[@]}"; echo "$form"; } | sha256sum | cut -c1-16)
cached=1
for f in "${products[@]}"; do [ -f "$out/$f" ] || cached=; done
if [ -z "$force" ] && [ -n "$cached" ] && [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ]; then
  echo "vm-image: cached ($form, $out, $stamp)"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "vm-image: building the image needs root (debootstrap)" >&2; exit 1; }
for tool in "${tools[@]}"; do
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

# 3. The root: minimal Debian 12 with the tests' run-time needs (busybox-
# static and file: cmd/moat-runtime's test image, for its systemd driver
# test). The box adds what a booted, reachable Debian with login sessions
# needs, and podman's packages to install at boot (4. below).
root="$work/root"
include=libseccomp2,python3,curl,nodejs,util-linux,procps,iproute2,kmod,busybox-static,file
[ "$form" = box ] &&
  include+=,systemd-sysv,udev,dbus,dbus-user-session,libpam-systemd,openssh-server,sudo,rsync
echo "vm-image: debootstrap bookworm from $mirror ($form)"
debootstrap --variant=minbase --include="$include" \
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
if [ "$form" = vm ]; then
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
  exit 0
fi

# 4. podman for the box (cmd/moat-runtime's TestPodmanSystemdCgroup, podman
# --cgroup-manager systemd): its .debs and those of what it needs that the
# root lacks, resolved by the host's apt against the root's dpkg status,
# are stored in /var/cache/moat-debs and installed by vagrant-test.sh in
# the booted guest. Not in debootstrap's --include: containers-common's
# postinst fails to configure there (inside debootstrap's chroot, with no
# init running), and the guest has no mirror to fetch from at boot. No
# recommends: root podman with --network none needs neither slirp4netns,
# uidmap nor buildah.
debs="$root/var/cache/moat-debs"
mkdir -p "$debs/partial"
echo "vm-image: podman's packages for the box"
apt-get -q -y --no-install-recommends -o Debug::NoLocking=1 \
  -o Dir::State::status="$root/var/lib/dpkg/status" -o Dir::Cache::archives="$debs" \
  install --download-only podman >"$work/podman-debs.log" 2>&1 ||
  { tail -20 "$work/podman-debs.log" >&2; echo "vm-image: cannot download podman's packages" >&2; exit 1; }
rm -rf "$debs/partial" "$debs/lock"
ls "$debs"/podman_*.deb >/dev/null 2>&1 || { tail -20 "$work/podman-debs.log" >&2; echo "vm-image: no podman .deb downloaded" >&2; exit 1; }
echo "vm-image: $(ls "$debs" | wc -l) packages, $(du -sm "$debs" | cut -f1) MiB in /var/cache/moat-debs"

# The box. The user vagrant (uid 1000, the first user a Debian install
# makes), sudo without a password as Vagrant expects, and a key pair made
# now for this box (not Vagrant's published insecure key).
grep -q '^vagrant:' "$root/etc/passwd" || {
  echo 'vagrant:x:1000:1000:vagrant:/home/vagrant:/bin/bash' >>"$root/etc/passwd"
  echo 'vagrant:x:1000:' >>"$root/etc/group"
  echo 'vagrant:*:19000:0:99999:7:::' >>"$root/etc/shadow"
  echo 'vagrant:!::' >>"$root/etc/gshadow"
}
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >"$root/etc/sudoers.d/vagrant"
chmod 0440 "$root/etc/sudoers.d/vagrant"
rm -f "$work/vagrant_key" "$work/vagrant_key.pub"
ssh-keygen -q -t ed25519 -N '' -C "moat-box-$stamp" -f "$work/vagrant_key"
install -d -m 0700 -o 1000 -g 1000 "$root/home/vagrant" "$root/home/vagrant/.ssh"
install -m 0600 -o 1000 -g 1000 "$work/vagrant_key.pub" "$root/home/vagrant/.ssh/authorized_keys"
# sshd's host keys were made by its postinst inside debootstrap; a box is
# built per machine and never published, so they stay.
echo moat-debian >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tmoat-debian\n::1\tlocalhost\n' >"$root/etc/hosts"
echo 'LABEL=moat-root / ext4 rw,errors=remount-ro 0 0' >"$root/etc/fstab"
# udev would load the ATA drivers for the emulated IDE controller, whose
# SCSI dependencies are left out above; the disk is virtio.
printf 'blacklist ata_piix\nblacklist ata_generic\nblacklist pata_acpi\n' >"$root/etc/modprobe.d/moat-box.conf"
# A fresh machine id on the first boot of each copy.
: >"$root/etc/machine-id"
# DHCP on the first virtio NIC, for the libvirt network Vagrant reaches
# the guest through.
mkdir -p "$root/etc/systemd/network"
printf '[Match]\nName=en* eth*\n\n[Network]\nDHCP=ipv4\n' >"$root/etc/systemd/network/50-dhcp.network"
systemctl --root="$root" enable systemd-networkd.service >/dev/null 2>&1
# No timers that would compete with the tests for two emulated CPUs.
systemctl --root="$root" mask apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
  e2scrub_all.timer fstrim.timer systemd-networkd-wait-online.service >/dev/null 2>&1

# Room for the synced tree, the test binaries and what the tests write;
# free blocks cost nothing in the qcow2.
size=$(($(du -sm "$root" | cut -f1) + 3072))
mkfs.ext4 -q -F -L moat-root -d "$root" "$work/root.img" "${size}M"
box="$work/box"
mkdir -p "$box"
qemu-img convert -O qcow2 "$work/root.img" "$box/box.img"
rm -f "$work/root.img"
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' $(((size + 1023) / 1024)) >"$box/metadata.json"
cp "$here/box-Vagrantfile" "$box/Vagrantfile"
mv "$work/vmlinux" "$work/initrd.cpio" "$box/"
cp "$work/vagrant_key" "$box/vagrant_key"
echo "$kver" >"$box/kernel-version"
(cd "$box" && tar -cf "$work/moat-debian12.box" metadata.json Vagrantfile box.img vmlinux initrd.cpio vagrant_key kernel-version)
mv "$work/moat-debian12.box" "$out/moat-debian12.box"
install -m 0600 "$work/vagrant_key" "$out/vagrant_key"
echo "$kver" >"$out/kernel-version"
rm -rf "$work"
echo "$stamp" >"$out/stamp"
echo "vm-image: box built in $(($(date +%s) - t0)) s (kernel $kver, disk ${size} MiB, $(du -m "$out/moat-debian12.box" | cut -f1) MiB box)"
