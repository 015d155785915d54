package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moat-sandbox/moat/cgroups"
)

// TestCgroupsPathExtras: create writes the resources beyond the three
// limits that runc's cgroupfs driver writes (cpuset cpus and mems, cpu
// shares, the memory reservation) at linux.cgroupsPath, where they read
// back as runc leaves them (v1: cpuset.cpus, cpu.shares,
// memory.soft_limit_in_bytes; v2: cpuset.cpus, cpu.weight, memory.low),
// the init lives in that cpuset group, update changes the reservation
// (runc update --memory-reservation), and delete removes the group. On
// main create refused them (linux.resources.cpu: only quota, period and
// shares).
func TestCgroupsPathExtras(t *testing.T) {
	h := cgroupsPathHost(t)
	path := fmt.Sprintf("/moat-rt-extras-%d", os.Getpid())
	root := t.TempDir()
	_, spec := bundle(t, "/bin/sh", "-c", "exec sleep 30")
	limit, reservation, shares := int64(64<<20), int64(32<<20), uint64(512)
	spec.Linux.CgroupsPath = path
	spec.Linux.Resources = &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &limit, Reservation: &reservation},
		CPU:    &specs.LinuxCPU{Shares: &shares, Cpus: "0", Mems: "0"},
	}
	b := writeBundle(t, spec)
	if _, errs, code := rt(t, root, "create", "--bundle", b, "c1"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "c1")
	dir := func(c string) string {
		if h.Layout == cgroups.Unified {
			return filepath.Join(h.Unified, path)
		}
		return filepath.Join(h.V1[c], path)
	}
	read := func(c, file string) string {
		v, err := os.ReadFile(filepath.Join(dir(c), file))
		if err != nil {
			t.Errorf("read %s: %v", file, err)
		}
		return strings.TrimSpace(string(v))
	}
	want := map[[2]string]string{{"cpuset", "cpuset.cpus"}: "0", {"cpuset", "cpuset.mems"}: "0",
		{"cpu", "cpu.shares"}: "512", {"memory", "memory.soft_limit_in_bytes"}: strconv.FormatInt(reservation, 10)}
	low := [2]string{"memory", "memory.soft_limit_in_bytes"}
	if h.Layout == cgroups.Unified {
		// cpu.weight is shares mapped as runc maps them (1 + (s-2)*9999/262142).
		want = map[[2]string]string{{"", "cpuset.cpus"}: "0", {"", "cpuset.mems"}: "0",
			{"", "cpu.weight"}: strconv.FormatUint(1+(shares-2)*9999/262142, 10), {"", "memory.low"}: strconv.FormatInt(reservation, 10)}
		low = [2]string{"", "memory.low"}
	}
	for f, w := range want {
		if got := read(f[0], f[1]); got != w {
			t.Errorf("%s = %q, want %q", f[1], got, w)
		}
	}
	st := ociState(t, root, "c1")
	c := "cpuset"
	if h.Layout == cgroups.Unified {
		c = ""
	}
	if got := procGroups(t, st.Pid)[c]; got != path {
		t.Errorf("the init's cpuset group is %q, want %s", got, path)
	}
	if _, errs, code := rt(t, root, "update", "--memory-reservation", "16M", "c1"); code != 0 {
		t.Fatalf("update --memory-reservation: exit %d: %s", code, errs)
	}
	if got := read(low[0], low[1]); got != strconv.Itoa(16<<20) {
		t.Errorf("after update %s = %q, want %d", low[1], got, 16<<20)
	}
	if _, errs, code := rt(t, root, "delete", "--force", "c1"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, errs)
	}
	for f := range want {
		if _, err := os.Stat(dir(f[0])); err == nil {
			t.Errorf("%s is left after delete", dir(f[0]))
		}
	}
}
