#!/bin/bash
# PID 1 of the test VM (started by the initramfs from the share disk, which
# is mounted at /moat). No systemd: this script mounts what a booted Debian
# would, sets up pure cgroup v2 the way systemd lays it out (a leaf for the
# root runner; a user@1000.service subtree delegated to the user moat with
# cpu, memory and pids, like a user@.service drop-in with
# Delegate=cpu memory pids), then runs every test binary listed in
# /moat/pkgs.txt from its package directory, first as root with
# MOAT_REQUIRE_ALL=1, then as moat (uid 1000). Results go to /moat/results:
# IDENTITY/NAME.log (the -test.v output), .rc (exit status), .secs.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "moat-vm: $*"; }

res=/moat/results
finish() {
  say "done"
  sync
  echo o >/proc/sysrq-trigger
  sleep 10
  exit 0
}

cg=/sys/fs/cgroup
ctrls="+cpu +memory +pids"
userslice=$cg/user.slice/user-1000.slice
usvc=$userslice/user@1000.service
scope=$usvc/app.slice/moat-tests.scope
rootleaf=$cg/moat-vm.slice/root-tests.scope
asuser() {
  setpriv --reuid=1000 --regid=1000 --init-groups \
    env -i PATH="$PATH" HOME=/home/moat USER=moat LOGNAME=moat SHELL=/bin/bash TMPDIR=/tmp "$@"
}


# watch_pkg PID IDENTITY NAME: returns when PID (a test binary) has exited
# (bash reaps it, so kill -0 fails). One still running after
# MOAT_VM_PKG_LIMIT seconds (its own -test.timeout, which panics naming the
# running tests, should have fired by then)
# gets the kernel's task dump (sysrq t and w, nothing here reads the stuck
# process's memory map, which could block too) on the console, a SIGQUIT (Go
# prints every goroutine) and then a SIGKILL.
watch_pkg() {
  local pid=$1 who=$2 name=$3 n=0 limit=${MOAT_VM_PKG_LIMIT:-240} dump
  # Forked now: if the whole guest wedges (no fork, no exec), this still
  # makes the kernel print every task's stack.
  (sleep "$limit" && echo 8 >/proc/sys/kernel/printk && echo w >/proc/sysrq-trigger && echo t >/proc/sysrq-trigger) &
  dump=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    n=$((n + 1))
    if [ $n -eq "$limit" ]; then
      say "$who $name still running after $limit s: $(cat /proc/$pid/wchan 2>/dev/null); kernel task dump follows"
      kill -QUIT "$pid" 2>/dev/null
    elif [ $n -eq $((limit + 10)) ]; then
      kill -KILL "$pid" 2>/dev/null
    elif [ $n -eq $((limit + 30)) ]; then
      say "$who $name: not gone 30 s after SIGKILL; giving up on this run"
      finish
    fi
  done
  kill "$dump" 2>/dev/null
}

# progress PID IDENTITY NAME LOG: copies the start and end lines of each
# test in LOG to the console (moat-t: IDENTITY NAME: ...) until PID exits.
# The console is read on the host as the guest goes, so when the whole VM
# runs out of time, summary.py names the tests that were still running (the
# share, with the logs, is not synced by then).
progress() {
  tail -n +1 -s 0.5 --pid="$1" -F "$4" 2>/dev/null |
    grep --line-buffered -E '^\s*(=== RUN|--- (PASS|FAIL|SKIP))' |
    sed -u "s/^/moat-t: $2 $3: /"
}

# Each binary runs in a session of its own (setsid): the tests signal
# process groups, and one that reached this script's (the kernel starts
# pid 1 in process group 0, which every child shares) stopped pid 1.
# As background jobs of a non-interactive shell they would start with SIGINT
# and SIGQUIT ignored, which a sandbox keeps for its tool as a plain process
# would: env resets them, so the signal tests see what a terminal gives.
run_all() { # run_all IDENTITY
  local who=$1 name rel skip rc t0 t1 pid prog args fixtures pscope
  mkdir -p "$res/$who"
  while read -r name rel skip; do
    [ -n "$name" ] || continue
    cd "/moat/src/$rel" || { echo 127 >"$res/$who/$name.rc"; continue; }
    args=(-test.v -test.count=1 "-test.timeout=${MOAT_VM_TEST_TIMEOUT:-200s}")
    # The plan's column: a -test.skip regexp, or run:REGEXP for a
    # package of which the VM runs only those tests (-test.run).
    case ${skip:--} in
      -) ;;
      run:*) args+=("-test.run=${skip#run:}") ;;
      *) args+=("-test.skip=$skip") ;;
    esac
    # The static probe of nsexec's rootfs fixture, built on the host.
    fixtures=(MOAT_NSEXEC_TEST_PROBE=/moat/fixtures/rootfsprobe)
    : >"$res/$who/$name.log"
    t0=$(date +%s.%N)
    if [ "$who" = root ]; then
      (echo "$BASHPID" >"$rootleaf/cgroup.procs" &&
        exec setsid env -i --default-signal=INT,QUIT PATH="$PATH" HOME=/root USER=root TMPDIR=/tmp "${fixtures[@]}" MOAT_REQUIRE_ALL=1 \
          "/moat/bin/$name.test" "${args[@]}") </dev/null >"$res/$who/$name.log" 2>&1 &
    else
      # Without MOAT_REQUIRE_ALL: as an ordinary user the tests that need
      # root skip; the host fails the run on any other capability skip.
      # Each binary gets a scope of its own, made by the user, as
      # systemd-run --user --scope would: moat alone in a delegated cgroup
      # moves itself into a leaf below it, after which that cgroup takes
      # no process (cgroup v2's no-internal-process rule).
      pscope=$usvc/app.slice/moat-tests-$name.scope
      asuser mkdir "$pscope"
      (echo "$BASHPID" >"$pscope/cgroup.procs" &&
        exec setsid setpriv --reuid=1000 --regid=1000 --init-groups \
          env -i --default-signal=INT,QUIT PATH="$PATH" HOME=/home/moat USER=moat LOGNAME=moat TMPDIR=/tmp "${fixtures[@]}" \
          "/moat/bin/$name.test" "${args[@]}") </dev/null >"$res/$who/$name.log" 2>&1 &
    fi
    pid=$!
    progress "$pid" "$who" "$name" "$res/$who/$name.log" &
    prog=$!
    watch_pkg "$pid" "$who" "$name"
    wait "$pid"
    rc=$?
    t1=$(date +%s.%N)
    wait "$prog"
    # The binary's scope, and whatever it left below it, goes (deepest first).
    [ "$who" = root ] || find "$pscope" -depth -type d -exec rmdir {} + 2>/dev/null
    echo "$rc" >"$res/$who/$name.rc"
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", b - a}' >"$res/$who/$name.secs"
    grep -E '^\s*--- (FAIL|SKIP)' "$res/$who/$name.log" | sed "s/^/moat-vm: $who $name: /" | head -40
    say "$who $name exit $rc in $(cat "$res/$who/$name.secs") s"
  done </moat/pkgs.txt
  cd /
}

setup_guest() {
  mount -t proc proc /proc
  mount -t sysfs sysfs /sys
  mkdir -p /dev/pts /dev/shm
  mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
  mount -t tmpfs -o mode=1777 tmpfs /dev/shm
  mount -t tmpfs -o mode=1777,size=1g tmpfs /tmp
  mount -t tmpfs -o mode=755 tmpfs /run
  # systemd's options for the unified hierarchy.
  mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup
  hostname moat-vm
  ip link set lo up
  echo 30 >/proc/sys/kernel/hung_task_timeout_secs
  mkdir -p "$res"
  {
    set -e
    echo "$ctrls" >$cg/cgroup.subtree_control
    mkdir -p $rootleaf "$usvc"
    # As systemd does for slices whose units account memory and tasks
    # (DefaultMemoryAccounting, DefaultTasksAccounting): available in the
    # root runner's leaf, not enabled below it.
    echo "+memory +pids" >$cg/moat-vm.slice/cgroup.subtree_control
    echo "$ctrls" >$cg/user.slice/cgroup.subtree_control
    echo "$ctrls" >$userslice/cgroup.subtree_control
    # The delegation boundary: what systemd chowns for Delegate=.
    chown 1000:1000 "$usvc" "$usvc/cgroup.procs" "$usvc/cgroup.subtree_control" "$usvc/cgroup.threads"
    # Below it the user's own manager makes its slices and scopes; here the
    # user does it, which proves the delegation works before any test runs.
    asuser sh -c "mkdir -p '$scope' && echo '$ctrls' >'$usvc/cgroup.subtree_control' &&
      echo '$ctrls' >'$usvc/app.slice/cgroup.subtree_control'"
    set +e
  } >"$res/setup.log" 2>&1 || { say "cgroup setup failed:"; cat "$res/setup.log"; echo 1 >"$res/setup.rc"; finish; }

  {
    echo "kernel: $(uname -r) ($(uname -v))"
    echo "cmdline: $(cat /proc/cmdline)"
    echo "cpus: $(nproc), memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
    echo "cgroup mounts:"; grep cgroup /proc/self/mountinfo
    echo "root controllers: $(cat $cg/cgroup.controllers)"
    echo "root subtree_control: $(cat $cg/cgroup.subtree_control)"
    echo "user@1000.service: $(stat -c '%U %n' "$usvc") subtree_control: $(cat "$usvc/cgroup.subtree_control")"
    echo "test scope controllers: $(cat "$scope/cgroup.controllers")"
    for s in kernel.unprivileged_userns_clone user.max_user_namespaces kernel.apparmor_restrict_unprivileged_userns; do
      echo "$s = $(sysctl -n $s 2>/dev/null || echo absent)"
    done
    echo "lsm: $(cat /sys/kernel/security/lsm 2>/dev/null)"
    echo "python3: $(python3 --version 2>&1), node: $(node --version 2>&1)"
  } >"$res/facts.txt" 2>&1
  sed 's/^/moat-vm: /' "$res/facts.txt"
}

[ -f /moat/env ] && . /moat/env # MOAT_VM_WHO, MOAT_VM_PKG_LIMIT, MOAT_VM_TEST_TIMEOUT from run.sh

# pid 1 only supervises: the tests run in a child shell in a session of its
# own, which powers the VM off itself when done. pid 1 (bash, holding the
# console) was seen stopped (state T, do_signal_stop from wait4) after the
# executor tests ran, with nothing left to continue it; the runner in its
# own session was not. Should the runner be stopped, pid 1 continues it.
if [ "${1:-}" != run ]; then
  setup_guest
  setsid bash "$0" run </dev/null &
  runner=$!
  while kill -0 "$runner" 2>/dev/null; do
    sleep 1
    if grep -q '^State:[[:space:]]*T' "/proc/$runner/status" 2>/dev/null; then
      say "the test runner was stopped by a signal; continuing it"
      kill -CONT "$runner"
    fi
  done
  finish
fi

case ${MOAT_VM_WHO:-both} in
  root | both) say "tests as root"; run_all root ;;
esac
case ${MOAT_VM_WHO:-both} in
  user | both) say "tests as moat (uid 1000)"; run_all user ;;
esac
finish
