package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// owner identifies the moat process that created a leaf. The start time
// (clock ticks after boot, field 22 of /proc/<pid>/stat, proc(5)) makes the
// pair unique across pid reuse: a recycled pid has a later start time.
type owner struct {
	pid   int
	start uint64
}

// selfOwner is the calling process.
func selfOwner() (owner, error) {
	pid := os.Getpid()
	start, err := startTime(pid)
	if err != nil {
		return owner{}, err
	}
	return owner{pid: pid, start: start}, nil
}

// startTime reads a process's start time from /proc/<pid>/stat.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// comm (field 2) is in parentheses and may hold spaces and ')': the
	// fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether the owner still runs: the pid exists and started
// at the recorded time. A pid we cannot read for another reason than
// ENOENT is kept as alive, so a leaf is never reclaimed on doubt.
func (o owner) alive() bool {
	st, err := startTime(o.pid)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	return err != nil || st == o.start
}

// leafName encodes the owner in a leaf's directory name.
func (o owner) leafName(id string) string {
	return strconv.Itoa(o.pid) + "-" + strconv.FormatUint(o.start, 10) + "-" + id
}

// parseLeafName is the inverse of leafName; ok is false for any directory
// moat did not name, which is then never touched.
func parseLeafName(name string) (o owner, id string, ok bool) {
	parts := strings.SplitN(name, "-", 3)
	if len(parts) != 3 || validID(parts[2]) != nil {
		return owner{}, "", false
	}
	pid, err1 := strconv.Atoi(parts[0])
	start, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return owner{}, "", false
	}
	return owner{pid: pid, start: start}, parts[2], true
}

// validID accepts ids that are safe as one path component and readable in
// a cgroup listing: 1 to 128 of [A-Za-z0-9_.-], not starting with '.'.
func validID(id string) error {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return fmt.Errorf("cgroups: invalid leaf id %q", id)
	}
	for _, c := range id {
		ok := c == '-' || c == '_' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !ok {
			return fmt.Errorf("cgroups: invalid leaf id %q", id)
		}
	}
	return nil
}
