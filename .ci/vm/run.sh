#!/usr/bin/env bash
# make vm-test: runs moat's whole test suite in a pure cgroup v2 VM with a
# stock Debian 12 kernel, as root (MOAT_REQUIRE_ALL=1) and as the ordinary
# user moat (uid 1000) in a systemd-style delegated subtree, and fails if any
# package fails there.
#
#   1. build-image.sh: kernel, initramfs and root image (cached in .vm/)
#   2. the test binaries, compiled here (go test -c), and the source tree
#      (tests read testdata relative to their package directory) go into a
#      second ext4 image, the share, which also receives the results
#   3. qemu boots with no network (-nic none): KVM when /dev/kvm boots the
#      stock kernel, else TCG; the console is read through a pipe into
#      .vm/console.log
#   4. the results are read back from the share image (debugfs, no mount)
#      and summarised per package and identity
#
# Environment: MOAT_VM_DIR (default .vm), MOAT_VM_ACCEL (auto|kvm|tcg),
# MOAT_VM_MEM (MiB, default 3072), MOAT_VM_CPUS (default 2),
# MOAT_VM_TIMEOUT (seconds for the boot and the tests, default 600),
# MOAT_VM_PKG_LIMIT (seconds before a hung test binary is dumped and killed,
# default 240), MOAT_VM_TEST_TIMEOUT (its -test.timeout, default 200s);
# for debugging: MOAT_VM_PKGS (a regexp: only the packages whose binary name,
# e.g. executor_native, matches), MOAT_VM_WHO (root|user|both).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
vm=${MOAT_VM_DIR:-$repo/.vm}
mkdir -p "$vm"
vm=$(cd "$vm" && pwd)
export PATH=/usr/local/go/bin:$PATH
qemu=qemu-system-x86_64
for tool in go $qemu mkfs.ext4 debugfs; do
  command -v "$tool" >/dev/null || { echo "vm-test: $tool not found (see .ci/vm/README.md)" >&2; exit 1; }
done

# The time limits, sized from measured runs (.ci/vm/README.md, "Time"):
# the whole guest (boot and both passes), one test binary before the guest
# dumps and kills it, and go test's own -test.timeout inside that, which
# panics with the names of the running tests.
vm_timeout=${MOAT_VM_TIMEOUT:-600}
pkg_limit=${MOAT_VM_PKG_LIMIT:-240}
test_timeout=${MOAT_VM_TEST_TIMEOUT:-200s}

t0=$(date +%s)
bash "$repo/.ci/vm/build-image.sh" "$vm"
t_image=$(($(date +%s) - t0))

# The share: test binaries, the source tree, the guest's init, results.
t1=$(date +%s)
share=$vm/share
rm -rf "$share" "$vm/results" "$vm/share.img"
mkdir -p "$share/bin" "$share/src" "$share/results"
tar -C "$repo" --exclude=./.git --exclude=./.vm --exclude=./bin --exclude=./build -cf - . | tar -C "$share/src" -xf -
# Which packages run in the VM, and what they skip there, is .ci/vm/plan:
# what needs the VM (stock kernel, pure cgroup v2, the delegated subtree,
# the ordinary user) runs; the rest is the host suite's. build-tests.sh
# compiles them here, with nsexec's static rootfs probe (compiled in the
# guest under TCG it took 90 to 190 s).
bash "$repo/.ci/vm/build-tests.sh" "$share"
cp "$repo/.ci/vm/guest-init.sh" "$share/guest-init.sh"
printf 'MOAT_VM_WHO=%q\nMOAT_VM_PKG_LIMIT=%q\nMOAT_VM_TEST_TIMEOUT=%q\n' "${MOAT_VM_WHO:-both}" "$pkg_limit" "$test_timeout" >"$share/env"
size=$(($(du -sm "$share" | cut -f1) * 2 + 128))
mkfs.ext4 -q -F -L moat-share -d "$share" "$vm/share.img" "${size}M"
cp "$share/pkgs.txt" "$vm/pkgs.txt"
rm -rf "$share"
t_bins=$(($(date +%s) - t1))
echo "vm-test: $(wc -l <"$vm/pkgs.txt") test binaries and the source in a ${size} MiB share (${t_bins} s)"

# KVM if it boots the stock kernel here, else TCG (kvm-probe.sh).
accel=${MOAT_VM_ACCEL:-auto}
[ "$accel" = auto ] && accel=$(bash "$repo/.ci/vm/kvm-probe.sh" "$vm/vmlinux" "$vm/kvm-probe.log")
case $accel in
  kvm) accel_args=(-accel kvm -cpu host) ;;
  tcg) accel_args=(-accel tcg,thread=multi -cpu max) ;;
  *) echo "vm-test: MOAT_VM_ACCEL must be auto, kvm or tcg" >&2; exit 1 ;;
esac
echo "vm-test: booting $(cat "$vm/kernel-version" 2>/dev/null) with $accel, ${MOAT_VM_CPUS:-2} vCPUs, ${MOAT_VM_MEM:-3072} MiB"

t2=$(date +%s)
set +e
timeout "$vm_timeout" $qemu "${accel_args[@]}" -smp "${MOAT_VM_CPUS:-2}" -m "${MOAT_VM_MEM:-3072}" \
  -nodefaults -no-user-config -display none -monitor none -serial stdio -nic none -no-reboot \
  -kernel "$vm/vmlinux" -initrd "$vm/initrd.cpio" \
  -append "console=ttyS0 panic=-1 quiet cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 rdinit=/init" \
  -drive "file=$vm/root.img,format=raw,if=virtio,snapshot=on" \
  -drive "file=$vm/share.img,format=raw,if=virtio" -device virtio-rng-pci </dev/null 2>&1 |
  while IFS= read -r line; do
    line=${line%$'\r'}
    printf '%s\n' "$line" >>"$vm/console.log.new"
    case $line in
      moat-vm:*|*"Kernel panic"*|*"qemu-system"*) printf '[%4ds] %s\n' $(($(date +%s) - t2)) "$line" ;;
    esac
  done
qrc=${PIPESTATUS[0]}
set -e
mv "$vm/console.log.new" "$vm/console.log"
t_vm=$(($(date +%s) - t2))
[ "$qrc" -eq 0 ] || echo "vm-test: qemu exited $qrc (124: timed out after $vm_timeout s)"

debugfs -R "rdump /results $vm" "$vm/share.img" >/dev/null 2>&1 || true
exec python3 "$repo/.ci/vm/summary.py" "$vm/results" "$vm/pkgs.txt" "$vm/console.log" \
  "image ${t_image} s, test binaries ${t_bins} s, VM (boot and tests) ${t_vm} s of ${vm_timeout} s, total $(($(date +%s) - t0)) s"
