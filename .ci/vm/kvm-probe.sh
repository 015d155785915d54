#!/usr/bin/env bash
# Prints kvm when /dev/kvm boots the stock kernel here, else tcg. A kernel
# that boots prints its banner within a second under KVM; some hosts (nested
# virtualisation without the features the kernel wants) hang silently
# instead, so the device existing is not enough. Shared by run.sh and
# vagrant-run.sh.
#
# Usage: kvm-probe.sh VMLINUX LOG
set -u
vmlinux=${1:?usage: kvm-probe.sh VMLINUX LOG}
log=${2:?usage: kvm-probe.sh VMLINUX LOG}
if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
  # In a subshell with stderr closed: a qemu that aborts on the device
  # is an answer here, not news for the log.
  (timeout 6 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nodefaults -no-user-config -display none \
    -monitor none -serial stdio -nic none -no-reboot -kernel "$vmlinux" \
    -append "console=ttyS0 panic=-1 rdinit=/none" </dev/null >"$log" 2>&1 || true) 2>/dev/null
  grep -q 'Linux version' "$log" && { echo kvm; exit 0; }
fi
echo tcg
