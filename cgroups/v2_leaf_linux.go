package cgroups

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// v2Leaf is one leaf in the unified hierarchy.
type v2Leaf struct {
	dir     string
	fdNum   int // O_PATH fd of dir, -1 when closed or not opened
	timeout time.Duration
}

// set writes the limits for the enabled controllers. memory.swap.max is the
// swap allowed on top of memory.max (cgroup-v2.rst), so OCI's memory+swap
// total becomes their difference; it exists only with swap accounting.
func (l *v2Leaf) set(lim limits, enabled []string) error {
	if lim.memory > 0 && slices.Contains(enabled, "memory") {
		if err := writeFile(l.dir, "memory.max", strconv.FormatInt(lim.memory, 10)); err != nil {
			return err
		}
		swap := "max"
		if lim.memSwap >= 0 {
			swap = strconv.FormatInt(lim.memSwap-lim.memory, 10)
		}
		if err := writeFile(l.dir, "memory.swap.max", swap); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if lim.pids > 0 && slices.Contains(enabled, "pids") {
		if err := writeFile(l.dir, "pids.max", strconv.FormatInt(lim.pids, 10)); err != nil {
			return err
		}
	}
	if lim.cpuQuota > 0 && slices.Contains(enabled, "cpu") {
		v := strconv.FormatInt(lim.cpuQuota, 10) + " " + strconv.FormatUint(lim.cpuPeriod, 10)
		if err := writeFile(l.dir, "cpu.max", v); err != nil {
			return err
		}
	}
	return nil
}

func (l *v2Leaf) fd() (int, bool) { return l.fdNum, l.fdNum >= 0 }

func (l *v2Leaf) tasks() ([]*os.File, error) { return nil, nil }

func (l *v2Leaf) add(pid int) error {
	return writeFile(l.dir, "cgroup.procs", strconv.Itoa(pid))
}

// kill writes cgroup.kill (kernel >= 5.14), which SIGKILLs every process
// of the subtree at once, racing no fork (cgroup-v2.rst, "cgroup.kill").
// Older kernels get the freeze, signal, thaw sequence over cgroup.freeze
// (>= 5.2). Either way it waits until cgroup.events says "populated 0".
func (l *v2Leaf) kill() error {
	err := writeFile(l.dir, "cgroup.kill", "1")
	if errors.Is(err, os.ErrNotExist) {
		err = l.killFrozen()
	}
	if err != nil {
		return fmt.Errorf("kill cgroup %s: %w", l.dir, err)
	}
	empty, err := poll(l.timeout, func() (bool, error) {
		p, err := l.populated()
		return !p, err
	})
	if err == nil && !empty {
		err = fmt.Errorf("kill cgroup %s: still populated after %v", l.dir, l.timeout)
	}
	return err
}

func (l *v2Leaf) killFrozen() error {
	frozen := writeFile(l.dir, "cgroup.freeze", "1") == nil
	if frozen {
		_, _ = poll(time.Second, func() (bool, error) {
			ev, err := readKV(l.dir, "cgroup.events")
			return ev["frozen"] == 1, err
		})
		defer writeFile(l.dir, "cgroup.freeze", "0")
	}
	pids, err := readPids(l.dir)
	if err != nil {
		return err
	}
	for _, p := range pids {
		if err := unix.Kill(p, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill %d: %w", p, err)
		}
	}
	return nil
}

func (l *v2Leaf) populated() (bool, error) {
	ev, err := readKV(l.dir, "cgroup.events")
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return ev["populated"] == 1, err
}

// stats reads the counters described on Usage; not full, only the events
// (Leaf.Events). cpu.stat usage_usec is there even without the cpu
// controller (it is a core file since 4.15).
func (l *v2Leaf) stats(full bool) (Usage, error) {
	var u Usage
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if !full {
		mev, err := readKV(l.dir, "memory.events")
		keep(err)
		u.OOMKills = mev["oom_kill"]
		u.OOMKilled = u.OOMKills > 0
		pev, err := readKV(l.dir, "pids.events")
		keep(err)
		u.PidsLimitHits = pev["max"]
		if err := errors.Join(errs...); err != nil {
			return u, fmt.Errorf("stats cgroup %s: %w", l.dir, err)
		}
		return u, nil
	}
	var err error
	u.MemoryCurrent, err = readUint(l.dir, "memory.current")
	keep(err)
	u.MemoryPeak, err = readUint(l.dir, "memory.peak")
	if errors.Is(err, os.ErrNotExist) {
		u.MemoryPeak, err = u.MemoryCurrent, nil
	}
	keep(err)
	mev, err := readKV(l.dir, "memory.events")
	keep(err)
	u.OOMKills = mev["oom_kill"]
	u.OOMKilled = u.OOMKills > 0
	u.PidsCurrent, err = readUint(l.dir, "pids.current")
	keep(err)
	pev, err := readKV(l.dir, "pids.events")
	keep(err)
	u.PidsLimitHits = pev["max"]
	cpu, err := readKV(l.dir, "cpu.stat")
	keep(err)
	u.CPUTime = time.Duration(cpu["usage_usec"]) * time.Microsecond
	u.CPUThrottled = cpu["nr_throttled"]
	u.CPUThrottledTime = time.Duration(cpu["throttled_usec"]) * time.Microsecond
	if err := errors.Join(errs...); err != nil {
		return u, fmt.Errorf("stats cgroup %s: %w", l.dir, err)
	}
	return u, nil
}

// remove closes the fd and removes the directory.
func (l *v2Leaf) remove() error {
	l.forget()
	return rmdir(l.dir)
}

func (l *v2Leaf) forget() {
	if l.fdNum >= 0 {
		unix.Close(l.fdNum)
		l.fdNum = -1
	}
}

func (l *v2Leaf) leafDirs() []string { return []string{l.dir} }
