#!/usr/bin/env bash
# The Vagrantfile's "test" provisioner (vagrant provision --provision-with
# test): runs the test packages .ci/vm/plan sends to a VM inside the box,
# first as root (MOAT_REQUIRE_ALL=1) in a system scope with Delegate=yes,
# then as the ordinary login user (vagrant) in a scope of its lingering
# systemd user manager with Delegate=yes, then the login-session tests as
# that user through an ssh login (no wrapper: the session's own root-owned
# scope), and prints the same per-package
# summary as `make vm-test` (summary.py). Exits non-zero when a package
# fails.
#
# The test binaries: MOAT_TESTS names a directory that build-tests.sh filled
# on the host (make vagrant-test syncs it in: no Go in the guest, whose
# compiler under TCG is far too slow); without it they are compiled here
# with the same script, which needs the Go the setup provisioner installs
# (the public boxes).
#
# Environment (the Vagrantfile passes them on): MOAT_TESTS, MOAT_VM_WHO
# (root|user|both), MOAT_VM_PKG_LIMIT (seconds before a test binary gets
# SIGQUIT, then SIGKILL; default 240), MOAT_VM_TEST_TIMEOUT (its
# -test.timeout, whose panic names the running tests; default 200s).
#
# On a host that restricts unprivileged user namespaces through AppArmor
# (Ubuntu 24.04: kernel.apparmor_restrict_unprivileged_userns=1), it first
# checks that moat, run as the user, stops with a setup error naming that
# sysctl, then that the profile in .ci/vm/apparmor/moat lets it run, and
# loads .ci/vm/apparmor/moat-tests for the test binaries before the suite.
set -euo pipefail

repo=${MOAT_REPO:-/vagrant}
user=${MOAT_TEST_USER:-vagrant}
uid=$(id -u "$user")
home=$(getent passwd "$user" | cut -d: -f6)
out=/var/tmp/moat-vm
who=${MOAT_VM_WHO:-both}
pkg_limit=${MOAT_VM_PKG_LIMIT:-240}
test_timeout=${MOAT_VM_TEST_TIMEOUT:-200s}
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
[ "$(id -u)" -eq 0 ] || { echo "vagrant-test: run as root" >&2; exit 1; }

# The user's commands run in a scope of its systemd user manager with cgroup
# delegation (what a login session's `systemd-run --user --scope -p
# Delegate=yes` gives); root's in a transient scope of the system manager
# with Delegate=yes: a leaf of its own, not the provisioner's SSH session.
user_scope=(sudo -u "$user" XDG_RUNTIME_DIR="/run/user/$uid" systemd-run --user --scope -p Delegate=yes --quiet --)
root_scope=(systemd-run --scope -p Delegate=yes --quiet --)
as_user() { "${user_scope[@]}" "$@"; }

t0=$(date +%s)
rm -rf "$out"
mkdir -p "$out/results/root" "$out/results/user" "$out/results/login"
tests=${MOAT_TESTS:-}
if [ -z "$tests" ]; then
  bash "$repo/.ci/vm/build-tests.sh" "$out/tests"
  tests=$out/tests
  echo "vagrant-test: compiled $(wc -l <"$tests/pkgs.txt") test binaries in $(($(date +%s) - t0)) s"
fi
[ -s "$tests/pkgs.txt" ] || { echo "vagrant-test: no test binaries in $tests" >&2; exit 1; }
chmod -R a+rX "$tests"

# podman (cmd/moat-runtime's TestPodmanSystemdCgroup), whose packages
# build-image.sh stored in the box: installed here, in the booted guest,
# since containers-common fails to configure under debootstrap and the
# guest has no mirror (a public box's setup provisioner installs it from
# its mirror). Once per guest; a failure is reported and the test then
# fails on the missing podman (MOAT_REQUIRE_ALL=1). --force-unsafe-io: no
# fsync per file of a disk this run throws away. policy-rc.d (exit 101,
# "action forbidden", which deb-systemd-invoke honours; Debian's
# policy-rc.d interface, /usr/share/doc/init-system-helpers/README.policy-rc.d.gz):
# podman's postinst would start podman-auto-update.service,
# podman-restart.service and their timer and socket, which would run
# podman beside the tests; enabled, they start at a boot this guest does
# not have.
debs=/var/cache/moat-debs
if [ -d "$debs" ] && ! command -v podman >/dev/null; then
  t=$(date +%s)
  policy=
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d; policy=1; }
  if DEBIAN_FRONTEND=noninteractive dpkg -i --force-unsafe-io "$debs"/*.deb >"$out/results/podman-install.log" 2>&1; then
    echo "vagrant-test: podman installed from $debs in $(($(date +%s) - t)) s"
  else
    echo "vagrant-test: FAIL: installing podman from $debs:"
    tail -20 "$out/results/podman-install.log"
  fi
  [ -z "$policy" ] || rm -f /usr/sbin/policy-rc.d
  echo "podman's units: $(systemctl is-active podman-auto-update.timer podman.socket podman-restart.service | tr '\n' ' ')" >>"$out/results/podman-install.log"
fi

{
  echo "kernel: $(uname -r) ($(uname -v))"
  echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cmdline: $(cat /proc/cmdline)"
  echo "cpus: $(nproc), memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
  echo "init: $(cat /proc/1/comm), cgroup: $(stat -fc %T /sys/fs/cgroup) controllers $(cat /sys/fs/cgroup/cgroup.controllers)"
  echo "user manager: $(systemctl show "user@$uid.service" -p ActiveState -p Delegate -p DelegateControllers | tr '\n' ' ')"
  echo "linger: $(loginctl show-user "$user" -p Linger 2>/dev/null)"
  echo "kernel.apparmor_restrict_unprivileged_userns = $(sysctl -n kernel.apparmor_restrict_unprivileged_userns 2>/dev/null || echo absent)"
  echo "python3: $(python3 --version 2>&1), node: $(node --version 2>&1)"
  echo "podman: $(podman --version 2>&1)"
} >"$out/results/facts.txt"

apparmor_fail=0
if [ "$(sysctl -n kernel.apparmor_restrict_unprivileged_userns 2>/dev/null || echo 0)" = 1 ]; then
  echo "vagrant-test: unprivileged user namespaces are restricted by AppArmor"
  (cd "$repo" && go build -buildvcs=false -o "$out/moat" ./cmd/moat)
  install -m 0755 "$out/moat" /usr/local/bin/moat
  apparmor_parser -R /etc/apparmor.d/moat 2>/dev/null || true
  rm -f /etc/apparmor.d/moat
  if as_user /usr/local/bin/moat run -- /bin/true >"$out/results/apparmor-before.log" 2>&1; then
    echo "vagrant-test: FAIL: moat ran as $user although AppArmor restricts user namespaces"
    apparmor_fail=1
  elif grep -q kernel.apparmor_restrict_unprivileged_userns "$out/results/apparmor-before.log"; then
    echo "vagrant-test: ok: without a profile moat stops with: $(grep -m1 kernel.apparmor_restrict_unprivileged_userns "$out/results/apparmor-before.log")"
  else
    echo "vagrant-test: FAIL: moat's error does not name kernel.apparmor_restrict_unprivileged_userns:"
    cat "$out/results/apparmor-before.log"
    apparmor_fail=1
  fi
  install -m 0644 "$repo/.ci/vm/apparmor/moat" /etc/apparmor.d/moat
  apparmor_parser -r /etc/apparmor.d/moat
  if as_user /usr/local/bin/moat run -- /bin/true >"$out/results/apparmor-after.log" 2>&1; then
    echo "vagrant-test: ok: with .ci/vm/apparmor/moat loaded moat runs as $user"
  else
    echo "vagrant-test: FAIL: moat still fails with the profile loaded:"
    cat "$out/results/apparmor-after.log"
    apparmor_fail=1
  fi
  install -m 0644 "$repo/.ci/vm/apparmor/moat-tests" /etc/apparmor.d/moat-tests
  apparmor_parser -r /etc/apparmor.d/moat-tests
fi

# run_all IDENTITY: every planned binary from its package directory (tests
# read testdata relative to it). A binary still running after pkg_limit
# seconds (its -test.timeout should have fired) gets SIGQUIT, which makes Go
# print every goroutine, and SIGKILL 10 s later. SIGINT and SIGQUIT start
# at their default (env): a sandbox keeps an inherited ignore for its tool,
# as a plain process would, and the signal tests expect a terminal's.
run_all() {
  local id=$1 name rel skip rc t args env
  while read -r name rel skip; do
    [ -n "$name" ] || continue
    args=(-test.v -test.count=1 "-test.timeout=$test_timeout")
    case ${skip:--} in # .ci/vm/plan: a -test.skip regexp, or run:REGEXP
      -) ;;
      run:*) args+=("-test.run=${skip#run:}") ;;
      *) args+=("-test.skip=$skip") ;;
    esac
    env=(PATH="$PATH" TMPDIR=/tmp MOAT_NSEXEC_TEST_PROBE="$tests/fixtures/rootfsprobe")
    cd "$repo/$rel"
    t=$(date +%s.%N)
    set +e
    if [ "$id" = root ]; then
      timeout -s QUIT -k 10 "$pkg_limit" "${root_scope[@]}" env -i --default-signal=INT,QUIT "${env[@]}" HOME=/root USER=root MOAT_REQUIRE_ALL=1 \
        "$tests/bin/$name.test" "${args[@]}" </dev/null >"$out/results/root/$name.log" 2>&1
    else
      # Without MOAT_REQUIRE_ALL: as the user, the tests that need root
      # skip; summary.py fails the package on any other capability skip.
      timeout -s QUIT -k 10 "$pkg_limit" "${user_scope[@]}" env -i --default-signal=INT,QUIT "${env[@]}" HOME="$home" USER="$user" LOGNAME="$user" \
        XDG_RUNTIME_DIR="/run/user/$uid" "$tests/bin/$name.test" "${args[@]}" </dev/null >"$out/results/user/$name.log" 2>&1
    fi
    rc=$?
    set -e
    echo "$rc" >"$out/results/$id/$name.rc"
    awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f\n", b - a}' >"$out/results/$id/$name.secs"
    grep -E '^\s*--- (FAIL|SKIP)' "$out/results/$id/$name.log" | sed "s/^/vagrant-test: $id $name: /" | head -40 || true
    echo "vagrant-test: $id $name exit $rc in $(cat "$out/results/$id/$name.secs") s"
  done <"$tests/pkgs.txt"
  cd /
}

# run_login: the tests that need a real login session, as $user through an
# ssh login to this machine (sshd and pam_systemd: a session-N.scope of the
# system manager, owned by root and delegated to no one, as a user who logs
# in gets) with no wrapper of any kind. The key is made for this pass and
# taken out of authorized_keys again after it.
login_pkgs=(cmd_moat)
login_run='^TestRunInLoginSession$'
run_login() {
  local name rel skip rc t key=$out/login-key auth=$home/.ssh/authorized_keys
  ssh-keygen -q -t ed25519 -N '' -C "moat-login-pass" -f "$key"
  cp -p "$auth" "$out/authorized_keys.orig"
  cat "$key.pub" >>"$auth"
  local ssh_as_user=(ssh -i "$key" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "$user@127.0.0.1")
  "${ssh_as_user[@]}" 'echo "login session: $(cat /proc/self/cgroup), XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR"' </dev/null >>"$out/results/facts.txt" 2>&1 || true
  while read -r name rel skip; do
    [[ " ${login_pkgs[*]} " == *" $name "* ]] || continue
    t=$(date +%s.%N)
    set +e
    timeout -s QUIT -k 10 "$pkg_limit" "${ssh_as_user[@]}" "cd $repo/$rel && exec env --default-signal=INT,QUIT PATH=$PATH TMPDIR=/tmp \
      MOAT_NSEXEC_TEST_PROBE=$tests/fixtures/rootfsprobe $tests/bin/$name.test -test.v -test.count=1 -test.timeout=$test_timeout '-test.run=$login_run'" \
      </dev/null >"$out/results/login/$name.log" 2>&1
    rc=$?
    set -e
    echo "$rc" >"$out/results/login/$name.rc"
    awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f\n", b - a}' >"$out/results/login/$name.secs"
    grep -E '^\s*--- (FAIL|SKIP)' "$out/results/login/$name.log" | sed "s/^/vagrant-test: login $name: /" | head -40 || true
    echo "vagrant-test: login $name exit $rc in $(cat "$out/results/login/$name.secs") s"
  done <"$tests/pkgs.txt"
  cat "$out/authorized_keys.orig" >"$auth"
}

case $who in root | both) echo "vagrant-test: tests as root"; run_all root ;; esac
case $who in user | both) echo "vagrant-test: tests as $user (uid $uid)"; run_all user ;; esac
case $who in user | both) echo "vagrant-test: tests as $user in an ssh login session"; run_login ;; esac
chmod -R a+rX "$out/results"

set +e
MOAT_VM_WHO=$who MOAT_VM_SYSTEMD=1 python3 "$repo/.ci/vm/summary.py" "$out/results" "$tests/pkgs.txt" - \
  "$(. /etc/os-release && echo "$PRETTY_NAME"), tests $(($(date +%s) - t0)) s"
rc=$?
[ "$apparmor_fail" -eq 0 ] || rc=1
exit "$rc"
