package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// kill empties the leaf. Cgroup v1 has no cgroup.kill, so the leaf is frozen
// first (freezer-subsystem.txt): a frozen task cannot fork, so the pid list
// read next is complete; SIGKILL is queued to every task and takes effect
// when the leaf is thawed. This is runc's signalAllProcesses sequence. Without
// a freezer the list can race with forks, so the loop repeats until the leaf
// is empty; the pids limit bounds each round.
func (l *v1Leaf) kill() error {
	deadline := time.Now().Add(l.timeout)
	for {
		frozen := l.freeze()
		pids, err := l.procs()
		if err != nil {
			l.thaw(frozen)
			return err
		}
		for _, p := range pids {
			if err := unix.Kill(p, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				l.thaw(frozen)
				return fmt.Errorf("kill %d: %w", p, err)
			}
		}
		l.thaw(frozen)
		empty, err := poll(50*time.Millisecond, l.empty)
		if err != nil || empty {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kill cgroup %s: %d processes left after %v", l.dirs[0], len(pids), l.timeout)
		}
	}
}

func (l *v1Leaf) empty() (bool, error) {
	pids, err := l.procs()
	return len(pids) == 0, err
}

// freeze freezes the leaf and waits for FROZEN (a task in an uninterruptible
// sleep keeps it FREEZING); it reports whether the leaf must be thawed.
func (l *v1Leaf) freeze() bool {
	d, ok := l.ctl["freezer"]
	if !ok || writeFile(d, "freezer.state", "FROZEN") != nil {
		return false
	}
	_, _ = poll(time.Second, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(d, "freezer.state"))
		return strings.TrimSpace(string(b)) == "FROZEN", err
	})
	return true
}

func (l *v1Leaf) thaw(frozen bool) {
	if frozen {
		_ = writeFile(l.ctl["freezer"], "freezer.state", "THAWED")
	}
}

func (l *v1Leaf) populated() (bool, error) {
	empty, err := l.empty()
	return !empty, err
}

// stats reads the counters described on Usage; not full, only the events
// (Leaf.Events).
func (l *v1Leaf) stats(full bool) (Usage, error) {
	var u Usage
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if d, ok := l.ctl["memory"]; ok {
		if full {
			var err error
			u.MemoryPeak, err = readUint(d, "memory.max_usage_in_bytes")
			keep(err)
			u.MemoryCurrent, err = readUint(d, "memory.usage_in_bytes")
			keep(err)
		}
		oom, err := readKV(d, "memory.oom_control")
		keep(err)
		if n, ok := oom["oom_kill"]; ok {
			u.OOMKills = n
			u.OOMKilled = n > 0
		} else {
			fail, err := readUint(d, "memory.failcnt")
			keep(err)
			u.OOMKilled = fail > 0
		}
	}
	if d, ok := l.ctl["pids"]; ok {
		if full {
			var err error
			u.PidsCurrent, err = readUint(d, "pids.current")
			keep(err)
		}
		ev, err := readKV(d, "pids.events")
		keep(err)
		u.PidsLimitHits = ev["max"]
	}
	if d, ok := l.ctl["cpuacct"]; ok && full {
		ns, err := readUint(d, "cpuacct.usage")
		keep(err)
		u.CPUTime = time.Duration(ns)
	}
	if d, ok := l.ctl["cpu"]; ok && full {
		st, err := readKV(d, "cpu.stat")
		keep(err)
		u.CPUThrottled = st["nr_throttled"]
		u.CPUThrottledTime = time.Duration(st["throttled_time"])
	}
	if err := errors.Join(errs...); err != nil {
		return u, fmt.Errorf("stats cgroup %s: %w", l.dirs[0], err)
	}
	return u, nil
}

// remove deletes the leaf's directory in every hierarchy.
func (l *v1Leaf) remove() error {
	var errs []error
	for _, d := range l.dirs {
		errs = append(errs, rmdir(d))
	}
	return errors.Join(errs...)
}

func (l *v1Leaf) forget() {}

func (l *v1Leaf) leafDirs() []string { return l.dirs }
