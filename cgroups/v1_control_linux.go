package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func (l *v1Leaf) pids() ([]int, error) { return l.procs() }

// pause writes FROZEN and waits for the state to read FROZEN
// (freezer-subsystem.txt: FREEZING while some task has not stopped yet).
// A leaf still FREEZING at the deadline is thawed: half frozen is neither
// paused nor running. The freezer leaf is the container's own directory in
// the freezer hierarchy, which Create makes beside the others
// (v1Controllers).
func (l *v1Leaf) pause(timeout time.Duration) error {
	d, ok := l.ctl["freezer"]
	if !ok {
		return ErrNoFreezer
	}
	if err := writeFile(d, "freezer.state", "FROZEN"); err != nil {
		return err
	}
	done, err := poll(timeout, func() (bool, error) {
		s, err := readState(d)
		return s == "FROZEN", err
	})
	if err == nil && !done {
		err = errors.New("some task did not stop within " + timeout.String() + " (an uninterruptible sleep?); thawed again")
	}
	if err != nil {
		_ = writeFile(d, "freezer.state", "THAWED")
		return err
	}
	return nil
}

func (l *v1Leaf) resume() error {
	d, ok := l.ctl["freezer"]
	if !ok {
		return ErrNoFreezer
	}
	return writeFile(d, "freezer.state", "THAWED")
}

func (l *v1Leaf) frozen() (bool, error) {
	d, ok := l.ctl["freezer"]
	if !ok {
		return false, nil
	}
	s, err := readState(d)
	return s != "THAWED", err
}

func readState(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
	return strings.TrimSpace(string(b)), err
}

// v1Unlimited is where v1 reads back "no limit": memory.limit_in_bytes
// shows PAGE_COUNTER_MAX in bytes (about 2^63 rounded down to a page).
const v1Unlimited = 1 << 62

func (l *v1Leaf) settings() (Settings, error) {
	var s Settings
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if d, ok := l.ctl["memory"]; ok {
		m, err := readUint(d, "memory.limit_in_bytes")
		keep(err)
		if m < v1Unlimited {
			s.Memory = int64(m)
		}
		sw, err := readUint(d, "memory.memsw.limit_in_bytes")
		keep(err)
		switch {
		case err != nil:
		case sw >= v1Unlimited:
			s.MemorySwap = -1
		default:
			s.MemorySwap = int64(sw)
		}
	}
	if d, ok := l.ctl["pids"]; ok {
		p, err := readUint(d, "pids.max")
		keep(err)
		s.Pids = int64(p)
	}
	if d, ok := l.ctl["cpu"]; ok {
		q, err := readInt(d, "cpu.cfs_quota_us")
		keep(err)
		s.CPUQuota = max(q, 0)
		s.CPUPeriod, err = readUint(d, "cpu.cfs_period_us")
		keep(err)
		s.CPUShares, err = readUint(d, "cpu.shares")
		keep(err)
	}
	return s, errors.Join(errs...)
}

func readInt(dir, name string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// update writes the changed limits. Memory and memory+swap are ordered so
// that memory <= memsw holds at every step, which the kernel enforces on
// each write (memory.txt, "memsw"): a memsw that grows goes first, one
// that shrinks after the memory limit. -1 lifts a limit in every v1 file
// written here.
func (l *v1Leaf) update(u update) error {
	if err := u.extras.lacking(false, func(c string) bool { _, ok := l.ctl[c]; return ok }, v1NotJoined); err != nil {
		return err
	}
	if u.memory != nil || u.memSwap != nil {
		d, ok := l.ctl["memory"]
		if !ok {
			return &ControllerError{Field: "memory.limit", Controller: "memory"}
		}
		if err := l.updateMemory(d, u); err != nil {
			return err
		}
	}
	if u.pids != nil {
		d, ok := l.ctl["pids"]
		if !ok {
			return &ControllerError{Field: "pids.limit", Controller: "pids"}
		}
		v := "max"
		if *u.pids > 0 {
			v = strconv.FormatInt(*u.pids, 10)
		}
		if err := writeFile(d, "pids.max", v); err != nil {
			return err
		}
	}
	if u.cpuQuota != nil || u.cpuPeriod != nil || u.cpuShares != nil {
		d, ok := l.ctl["cpu"]
		if !ok {
			return &ControllerError{Field: "cpu", Controller: "cpu"}
		}
		if u.cpuPeriod != nil {
			if err := writeFile(d, "cpu.cfs_period_us", strconv.FormatUint(*u.cpuPeriod, 10)); err != nil {
				return err
			}
		}
		if u.cpuQuota != nil {
			if err := writeFile(d, "cpu.cfs_quota_us", strconv.FormatInt(*u.cpuQuota, 10)); err != nil {
				return err
			}
		}
		if u.cpuShares != nil {
			if err := writeFile(d, "cpu.shares", strconv.FormatUint(*u.cpuShares, 10)); err != nil {
				return err
			}
		}
	}
	return setV1Extras(l.ctl, u.extras)
}

func (l *v1Leaf) updateMemory(d string, u update) error {
	memsw := exists(filepath.Join(d, "memory.memsw.limit_in_bytes"))
	writeMem := func() error {
		if u.memory == nil {
			return nil
		}
		return writeFile(d, "memory.limit_in_bytes", strconv.FormatInt(*u.memory, 10))
	}
	if !memsw || u.memSwap == nil {
		// Without swap accounting swap is not limited, as at Create (the
		// posture says so).
		return writeMem()
	}
	cur, err := readUint(d, "memory.memsw.limit_in_bytes")
	if err != nil {
		return err
	}
	writeSwap := func() error {
		return writeFile(d, "memory.memsw.limit_in_bytes", strconv.FormatInt(*u.memSwap, 10))
	}
	if *u.memSwap == -1 || uint64(*u.memSwap) > cur {
		if err := writeSwap(); err != nil {
			return err
		}
		return writeMem()
	}
	if err := writeMem(); err != nil {
		return err
	}
	return writeSwap()
}
