#!/usr/bin/env bash
# The Vagrantfile's "test" provisioner (vagrant provision --provision-with
# test): runs moat's suite inside the box as root (MOAT_REQUIRE_ALL=1) and as
# the ordinary login user (vagrant) in a systemd scope with Delegate=yes,
# then prints the same per-package summary as `make vm-test`.
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
out=/var/tmp/moat-vm
export PATH=/usr/local/go/bin:$PATH
[ "$(id -u)" -eq 0 ] || { echo "vagrant-test: run as root" >&2; exit 1; }

# as_user CMD...: CMD as the login user, in a scope of its systemd user
# manager with cgroup delegation (what a login session's
# `systemd-run --user --scope -p Delegate=yes` gives).
as_user() {
  sudo -u "$user" XDG_RUNTIME_DIR="/run/user/$uid" \
    systemd-run --user --scope -p Delegate=yes --quiet -- "$@"
}

t0=$(date +%s)
rm -rf "$out"
mkdir -p "$out/bin" "$out/results/root" "$out/results/user"
cd "$repo"
: >"$out/pkgs.txt"
mod=$(go list -m)
for pkg in $(go list -buildvcs=false -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do
  rel=${pkg#"$mod"}
  rel=${rel#/}
  rel=${rel:-.}
  name=$(echo "$rel" | tr / _)
  go test -buildvcs=false -c -o "$out/bin/$name.test" "$pkg"
  echo "$name $rel" >>"$out/pkgs.txt"
done
go build -buildvcs=false -o "$out/moat" ./cmd/moat
chmod -R a+rX "$out"
echo "vagrant-test: built $(wc -l <"$out/pkgs.txt") test binaries in $(($(date +%s) - t0)) s"

{
  echo "kernel: $(uname -r)"
  echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cgroup: $(stat -fc %T /sys/fs/cgroup) controllers $(cat /sys/fs/cgroup/cgroup.controllers)"
  echo "user manager: $(systemctl show "user@$uid.service" -p Delegate -p DelegateControllers | tr '\n' ' ')"
  echo "kernel.apparmor_restrict_unprivileged_userns = $(sysctl -n kernel.apparmor_restrict_unprivileged_userns 2>/dev/null || echo absent)"
} >"$out/results/facts.txt"

apparmor_fail=0
if [ "$(sysctl -n kernel.apparmor_restrict_unprivileged_userns 2>/dev/null || echo 0)" = 1 ]; then
  echo "vagrant-test: unprivileged user namespaces are restricted by AppArmor"
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

while read -r name rel; do
  cd "$repo/$rel"
  t=$(date +%s)
  set +e
  MOAT_REQUIRE_ALL=1 "$out/bin/$name.test" -test.v -test.count=1 -test.timeout=8m >"$out/results/root/$name.log" 2>&1
  echo $? >"$out/results/root/$name.rc"
  echo $(($(date +%s) - t)) >"$out/results/root/$name.secs"
  t=$(date +%s)
  # Without MOAT_REQUIRE_ALL: as the user, the tests that need root skip;
  # summary.py fails the package on any other capability skip.
  as_user env -i PATH="$PATH" HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" LOGNAME="$user" TMPDIR=/tmp \
    "$out/bin/$name.test" -test.v -test.count=1 -test.timeout=8m >"$out/results/user/$name.log" 2>&1
  echo $? >"$out/results/user/$name.rc"
  echo $(($(date +%s) - t)) >"$out/results/user/$name.secs"
  set -e
  echo "vagrant-test: $name: root exit $(cat "$out/results/root/$name.rc"), $user exit $(cat "$out/results/user/$name.rc")"
done <"$out/pkgs.txt"
cd /

set +e
python3 "$repo/.ci/vm/summary.py" "$out/results" "$out/pkgs.txt" - "$(. /etc/os-release && echo "$PRETTY_NAME"), total $(($(date +%s) - t0)) s"
rc=$?
[ "$apparmor_fail" -eq 0 ] || rc=1
exit "$rc"
