package cgroups

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func (l *v2Leaf) pids() ([]int, error) { return readPids(l.dir) }

// pause writes cgroup.freeze and waits for cgroup.events to say "frozen 1"
// (cgroup-v2.rst, "cgroup.freeze": the write returns before every task has
// stopped). A leaf not frozen by the deadline is thawed again.
func (l *v2Leaf) pause(timeout time.Duration) error {
	if err := writeFile(l.dir, "cgroup.freeze", "1"); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ErrNoFreezer
		}
		return err
	}
	done, err := poll(timeout, l.frozen)
	if err == nil && !done {
		err = errors.New("some task did not stop within " + timeout.String() + "; thawed again")
	}
	if err != nil {
		_ = writeFile(l.dir, "cgroup.freeze", "0")
		return err
	}
	return nil
}

func (l *v2Leaf) resume() error {
	err := writeFile(l.dir, "cgroup.freeze", "0")
	if errors.Is(err, os.ErrNotExist) {
		return ErrNoFreezer
	}
	return err
}

func (l *v2Leaf) frozen() (bool, error) {
	ev, err := readKV(l.dir, "cgroup.events")
	return ev["frozen"] == 1, err
}

func (l *v2Leaf) settings() (Settings, error) {
	var s Settings
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	m, err := readUint(l.dir, "memory.max")
	keep(err)
	s.Memory = int64(m)
	if sw, err := os.ReadFile(l.dir + "/memory.swap.max"); err == nil {
		if v := strings.TrimSpace(string(sw)); v == "max" {
			s.MemorySwap = -1
		} else if n, err := strconv.ParseInt(v, 10, 64); err == nil && s.Memory > 0 {
			s.MemorySwap = s.Memory + n
		}
	}
	p, err := readUint(l.dir, "pids.max")
	keep(err)
	s.Pids = int64(p)
	if f, err := fields(l.dir, "cpu.max"); err == nil && len(f) == 2 {
		s.CPUQuota, _ = strconv.ParseInt(f[0], 10, 64) // "max" reads as 0
		s.CPUPeriod, _ = strconv.ParseUint(f[1], 10, 64)
	} else {
		keep(err)
	}
	w, err := readUint(l.dir, "cpu.weight")
	keep(err)
	s.CPUShares = shareOfWeight(w)
	return s, errors.Join(errs...)
}

// update writes the changed limits. OCI's memory+swap becomes
// memory.swap.max, the swap on top of memory.max (cgroup-v2.rst), so a
// swap change reads the memory limit it is relative to; cpu.max holds
// quota and period together, so a change of one keeps the other. A file
// that is missing is a controller the leaf was not given.
func (l *v2Leaf) update(u update) error {
	ctl := func(field, controller string, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return &ControllerError{Field: field, Controller: controller}
		}
		return err
	}
	if err := u.extras.lacking(true, func(c string) bool { return hasField(l.dir, "cgroup.controllers", c) }, v2NotEnabled); err != nil {
		return err
	}
	if u.memory != nil {
		v := "max"
		if *u.memory > 0 {
			v = strconv.FormatInt(*u.memory, 10)
		}
		if err := writeFile(l.dir, "memory.max", v); err != nil {
			return ctl("memory.limit", "memory", err)
		}
	}
	if u.memSwap != nil {
		v := "max"
		if *u.memSwap > 0 {
			mem, err := readUint(l.dir, "memory.max")
			if err != nil {
				return ctl("memory.swap", "memory", err)
			}
			if mem == 0 {
				return &LimitsError{Field: "memory.swap", Reason: "a memory+swap limit needs a memory limit"}
			}
			v = strconv.FormatInt(max(*u.memSwap-int64(mem), 0), 10)
		}
		// Without swap accounting there is no memory.swap.max and swap is
		// not limited, as at Create.
		if err := writeFile(l.dir, "memory.swap.max", v); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if u.pids != nil {
		v := "max"
		if *u.pids > 0 {
			v = strconv.FormatInt(*u.pids, 10)
		}
		if err := writeFile(l.dir, "pids.max", v); err != nil {
			return ctl("pids.limit", "pids", err)
		}
	}
	if u.cpuQuota != nil || u.cpuPeriod != nil {
		f, err := fields(l.dir, "cpu.max")
		if err != nil {
			return ctl("cpu.quota", "cpu", err)
		}
		if len(f) != 2 {
			return fmt.Errorf("cpu.max reads %q, not QUOTA PERIOD", strings.Join(f, " "))
		}
		if u.cpuQuota != nil {
			f[0] = "max"
			if *u.cpuQuota > 0 {
				f[0] = strconv.FormatInt(*u.cpuQuota, 10)
			}
		}
		if u.cpuPeriod != nil {
			f[1] = strconv.FormatUint(*u.cpuPeriod, 10)
		}
		if err := writeFile(l.dir, "cpu.max", f[0]+" "+f[1]); err != nil {
			return err
		}
	}
	if u.cpuShares != nil {
		if err := writeFile(l.dir, "cpu.weight", strconv.FormatUint(weightOfShares(*u.cpuShares), 10)); err != nil {
			return ctl("cpu.shares", "cpu", err)
		}
	}
	return setV2Extras(l.dir, u.extras)
}
