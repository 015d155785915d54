#!/usr/bin/env bash
# make vagrant-test: the Vagrantfile's debian machine under libvirt with a
# box built here from Debian's packages, and the test provisioner in it: the
# test packages .ci/vm/plan sends to a VM, as root (MOAT_REQUIRE_ALL=1) and
# as the user vagrant in a delegated scope of its systemd user manager, with
# the same per-package summary as `make vm-test`. Nothing is downloaded but
# Debian packages (the box) and Go modules (the test binaries).
#
#   1. box: build-image.sh --box (cached in MOAT_VAGRANT_DIR until its
#      inputs change), added to a Vagrant home of its own there as
#      moat/debian12-STAMP; older moat boxes and their libvirt volumes go
#   2. libvirtd and virtlogd, started here when nothing runs them (a host or
#      container without systemd as pid 1), stopped again at the end
#   3. the test binaries and nsexec's probe, compiled here (build-tests.sh),
#      synced into the guest: no Go compiler runs in a TCG guest
#   4. vagrant up debian --provider libvirt: KVM when /dev/kvm boots the
#      stock kernel (kvm-probe.sh), else TCG; an isolated libvirt network
#   5. vagrant provision debian --provision-with test
#   6. vagrant destroy -f, on every way out
#
# Environment: MOAT_VAGRANT_DIR (default .vagrant-box), MOAT_VAGRANT_ACCEL
# (auto|kvm|tcg), MOAT_VAGRANT_UP_LIMIT (seconds for vagrant up, default
# 600), MOAT_VAGRANT_TEST_LIMIT (seconds for the test provisioner, default
# 2400), and the test provisioner's MOAT_VM_WHO, MOAT_VM_PKG_LIMIT (default
# 720), MOAT_VM_TEST_TIMEOUT (default 660s), MOAT_VM_PKGS (vagrant-test.sh,
# build-tests.sh).
set -euo pipefail
# One compound command: bash reads it whole before running it, so editing
# this file during a run cannot change the run.
{
repo=$(cd "$(dirname "$0")/../.." && pwd)
dir=${MOAT_VAGRANT_DIR:-$repo/.vagrant-box}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
export PATH=/usr/local/go/bin:$PATH
say() { echo "vagrant-test: $*"; }
for tool in go vagrant virsh libvirtd virtlogd qemu-system-x86_64 qemu-img rsync ssh; do
  command -v "$tool" >/dev/null || { say "$tool not found (.ci/setup installs it)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { say "needs root (libvirt's system instance, debootstrap)" >&2; exit 1; }
# One run at a time on a host: two would share the machine's name, the
# libvirt network and (when this script started it) libvirtd, which the
# first to finish would stop under the other.
exec 9>/run/lock/moat-vagrant-test.lock
if ! flock -n 9; then
  say "another make vagrant-test runs on this host; waiting for it"
  flock 9
fi

# Sized from measured runs (.ci/vm/README.md, "Time").
up_limit=${MOAT_VAGRANT_UP_LIMIT:-600}
test_limit=${MOAT_VAGRANT_TEST_LIMIT:-2400}
# One test binary: executor_native as root took over 200 s with a second
# TCG guest on the two cores, and 440 s of the former 540 s limit in a
# full run on a loaded host.
export MOAT_VM_PKG_LIMIT=${MOAT_VM_PKG_LIMIT:-720} MOAT_VM_TEST_TIMEOUT=${MOAT_VM_TEST_TIMEOUT:-660s}

# Vagrant's own state for this run lives in the cache, not in ~/.vagrant.d
# or the project's .vagrant/, which stay the user's.
export VAGRANT_HOME=$dir/home VAGRANT_DOTFILE_PATH=$dir/machines
export VAGRANT_CHECKPOINT_DISABLE=1 VAGRANT_DEFAULT_PROVIDER=libvirt
export LIBVIRT_DEFAULT_URI=qemu:///system
net=moat-vagrant
t_start=$(date +%s)

# 1. The box.
t=$(date +%s)
bash "$repo/.ci/vm/build-image.sh" "$dir" --box
stamp=$(cat "$dir/stamp")
box=moat/debian12-$stamp
t_box=$(($(date +%s) - t))

# in_net runs a command in the run's network namespace, when this script
# made one (it did if it started libvirtd; a libvirtd run by a service
# manager keeps its own networks, and vagrant reaches them from here).
netns=
in_net() {
  if [ -n "$netns" ]; then ip netns exec "$netns" "$@"; else "$@"; fi
}

cleanup() {
  local rc=$? t
  trap - EXIT INT TERM
  t=$(date +%s)
  (cd "$repo" && in_net timeout -k 10 180 vagrant destroy -f debian) || say "vagrant destroy failed"
  # vagrant-libvirt drops the network it made with the last domain on it;
  # make sure nothing of this run stays up either way.
  if virsh domstate moat-debian >/dev/null 2>&1; then
    virsh destroy moat-debian >/dev/null 2>&1 || true
    virsh undefine moat-debian --remove-all-storage >/dev/null 2>&1 || true
  fi
  if virsh net-info "$net" >/dev/null 2>&1; then
    virsh net-destroy "$net" >/dev/null 2>&1 || true
    virsh net-undefine "$net" >/dev/null 2>&1 || true
  fi
  t_destroy=$(($(date +%s) - t))
  stop_daemons
  [ -z "$netns" ] || ip netns del "$netns" 2>/dev/null || true
  say "box ${t_box} s, test binaries ${t_bins:-0} s, up (boot and setup) ${t_up:-0} of ${up_limit} s," \
    "tests ${t_test:-0} of ${test_limit} s, destroy ${t_destroy} s, total $(($(date +%s) - t_start)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# libvirt's daemons, when this script starts them: stopped at the end.
started=()
stop_daemons() {
  local pid i
  for pid in "${started[@]}"; do
    kill -TERM "$pid" 2>/dev/null || continue
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { say "pid $pid did not stop; killing it"; kill -KILL "$pid"; }
  done
  started=()
}
start_daemon() { # start_daemon PIDFILE CMD...
  local i pidfile=$1
  shift
  "$@" 9>&- # the daemon must not hold the run lock
  for i in $(seq 50); do [ -s "$pidfile" ] && break; sleep 0.2; done
  [ -s "$pidfile" ] || { say "$* wrote no $pidfile" >&2; return 1; }
  started=("$(cat "$pidfile")" "${started[@]}")
}

# Vagrant's progress meters (a line per percent, joined by carriage
# returns) would bury the log.
no_progress() { stdbuf -o0 tr '\r' '\n' | grep --line-buffered -v -e 'Progress: ' -e '^.\[K$' || true; }

# Added once per box (the previous ones go once libvirt runs).
if ! vagrant box list 2>/dev/null | grep -q "^$box "; then
  say "adding $box"
  vagrant box add --name "$box" "$dir/moat-debian12.box" 2>&1 | no_progress
fi
boxdir=$VAGRANT_HOME/boxes/${box//\//-VAGRANTSLASH-}/0/libvirt
say "box $box ($(cat "$boxdir/kernel-version")) in ${t_box} s"

# KVM when /dev/kvm boots the stock kernel here, else TCG.
accel=${MOAT_VAGRANT_ACCEL:-auto}
[ "$accel" = auto ] && accel=$(bash "$repo/.ci/vm/kvm-probe.sh" "$boxdir/vmlinux" "$dir/kvm-probe.log")
case $accel in
  kvm) driver=kvm ;;
  tcg) driver=qemu ;;
  *) say "MOAT_VAGRANT_ACCEL must be auto, kvm or tcg" >&2; exit 1 ;;
esac

# 2. libvirt, if nothing runs it. The libvirtd started here gets a mount
# namespace of its own, so that what it is shown changes nothing on the host:
#   - its qemu.conf is ours: no cgroup controllers (libvirt would make its
#     machine slices in the host's hierarchies; the guest has its own), and
#     no mount namespace per guest (libvirt would try to carry the covered
#     /dev/kvm into it, and fail);
#   - on a host whose /dev/kvm exists but cannot run the guest (the probe
#     said tcg), /dev/kvm is covered by an empty file: otherwise libvirt
#     probes qemu with KVM, finds KVM unusable for its qemu user and throws
#     its capability cache away on every call, two seconds each time.
if ! virsh uri >/dev/null 2>&1; then
  say "starting virtlogd and libvirtd (no service manager runs them)"
  start_daemon /run/virtlogd.pid virtlogd -d
  hide_kvm=
  [ "$accel" = tcg ] && [ -e /dev/kvm ] && hide_kvm=1
  printf '%s\n' '# moat vagrant-run.sh: the libvirtd it starts reads this, not /etc/libvirt/qemu.conf' \
    'cgroup_controllers = [ ]' 'namespaces = [ ]' >"$dir/qemu.conf"
  # And a network namespace of its own, made here: the guest's network (a
  # bridge, dnsmasq, the guest's address) and every vagrant command that
  # talks to the guest (ssh, rsync) live there, so no packet of the run
  # goes through the host's own network stack.
  netns=moat-vagrant-$$
  ip netns add "$netns"
  ip -n "$netns" link set lo up
  start_daemon /run/libvirtd.pid ip netns exec "$netns" unshare --mount --propagation private -- sh -ec '
    mount --bind "$1" /etc/libvirt/qemu.conf
    if [ -n "$2" ]; then f=$(mktemp); mount --bind "$f" /dev/kvm; rm -f "$f"; fi
    exec libvirtd -d' sh "$dir/qemu.conf" "$hide_kvm"
  for i in $(seq 50); do virsh uri >/dev/null 2>&1 && break; sleep 0.2; done
  virsh uri >/dev/null
fi
# The previous boxes and the volumes libvirt made of them go, so a rebuilt
# box is never shadowed by a stale copy.
vagrant box list 2>/dev/null | awk -v cur="$box" '$1 ~ /^moat\/debian12-/ && $1 != cur {print $1}' | while read -r old; do
  say "removing the old box $old"
  vagrant box remove --force --all "$old" || true
  virsh vol-list --pool default 2>/dev/null | awk -v p="${old//\//-VAGRANTSLASH-}_vagrant_box_image_" 'index($1, p) == 1 {print $1}' |
    while read -r vol; do virsh vol-delete --pool default "$vol" >/dev/null || true; done
done

# 3. The test binaries.
t=$(date +%s)
rm -rf "$dir/tests"
bash "$repo/.ci/vm/build-tests.sh" "$dir/tests"
t_bins=$(($(date +%s) - t))
say "$(wc -l <"$dir/tests/pkgs.txt") test binaries in ${t_bins} s"

# 4. Boot.
: >"$dir/console.log"
export MOAT_VAGRANT_BOX=$box MOAT_VAGRANT_TESTS=$dir/tests MOAT_VAGRANT_DRIVER=$driver \
  MOAT_VAGRANT_CONSOLE=$dir/console.log MOAT_VAGRANT_BOOT_TIMEOUT=$up_limit
cd "$repo"
# A machine left from a run that was killed outright goes first.
in_net timeout -k 10 180 vagrant destroy -f debian >/dev/null 2>&1 || true
say "vagrant up debian with $accel (libvirt driver $driver)"
t=$(date +%s)
set +e
in_net timeout -k 30 "$up_limit" vagrant up debian --provider libvirt 2>&1 | no_progress
rc=${PIPESTATUS[0]}
set -e
t_up=$(($(date +%s) - t))
if [ "$rc" -ne 0 ]; then
  say "vagrant up failed (exit $rc; 124: over $up_limit s); the console is in $dir/console.log"
  tail -30 "$dir/console.log" || true
  exit 1
fi

# 5. The suite.
t=$(date +%s)
set +e
in_net timeout -k 30 "$test_limit" vagrant provision debian --provision-with test 2>&1 | no_progress
rc=${PIPESTATUS[0]}
set -e
t_test=$(($(date +%s) - t))
[ "$rc" -eq 124 ] && say "the tests took over $test_limit s"
rm -rf "$dir/results"
mkdir -p "$dir/results"
in_net vagrant ssh debian -c 'sudo tar -C /var/tmp/moat-vm/results -cf - .' 2>/dev/null | tar -C "$dir/results" -xf - 2>/dev/null ||
  say "could not copy the results back"
say "logs in $dir/results/{root,user}/NAME.log, console in $dir/console.log"
exit "$rc"
}
