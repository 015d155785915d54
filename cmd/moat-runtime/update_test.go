package main

import (
	"os/exec"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestUpdateChangesLimits: update moves the memory, pids and cpu limits of
// a running container's leaf, from runc's flags and from --resources -,
// and the container lives by them: 100 MB in its tmpfs fits once memory
// is raised from 64 MiB, a fork fails once pids is lowered to what runs.
// A limit the kernel refuses (memory below what the tmpfs holds) fails
// and changes nothing.
func TestUpdateChangesLimits(t *testing.T) {
	root := t.TempDir()
	spec := sleeper(t)
	withLeaf(t, spec)
	mem, quota, period := int64(64<<20), int64(50000), uint64(100000)
	spec.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &mem}
	spec.Linux.Resources.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/work", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=512m"}})
	running(t, root, "u1", spec)
	pid := ociState(t, root, "u1").Pid
	lim := func(kind string) string { return limitOf(t, pid, kind) }

	if _, errs, code := rt(t, root, "update", "--memory", "256m", "--pids-limit", "100", "--cpu-quota", "25000", "--cpu-period", "50000", "u1"); code != 0 {
		t.Fatalf("update: exit %d: %s", code, errs)
	}
	for kind, want := range map[string]string{"memory": "268435456", "pids": "100", "cpu": "25000 50000"} {
		if got := lim(kind); got != want {
			t.Errorf("after update the %s limit is %s, want %s", kind, got, want)
		}
	}
	if accounted, off := swapOffIn(t, pid); accounted && !off {
		t.Error("after update swap is on; it stays off")
	}
	if out, errs, code := rt(t, root, "exec", "u1", "/bin/sh", "-c", "head -c 100000000 /dev/zero > /work/x && echo ok"); code != 0 || out != "ok\n" {
		t.Fatalf("100 MB under the raised limit: exit %d: %q %s", code, out, errs)
	}
	if _, errs, code := rt(t, root, "update", "--memory", "32m", "u1"); code != 1 || !strings.Contains(errs, "update container u1") {
		t.Errorf("update below what the container holds: exit %d: %s", code, errs)
	}
	if got := lim("memory"); got != "268435456" {
		t.Errorf("a refused update left the memory limit %s", got)
	}
	if _, errs, code := rt(t, root, "exec", "u1", "/bin/sh", "-c", ": > /work/x"); code != 0 {
		t.Fatalf("empty /work/x: exit %d: %s", code, errs)
	}

	cmd := exec.Command(runtimeBin(t), "--root", root, "update", "--resources", "-", "u1")
	cmd.Stdin = strings.NewReader(`{"memory":{"limit":33554432},"pids":{"limit":3}}`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update --resources -: %v: %s", err, out)
	}
	if got := lim("memory"); got != "33554432" {
		t.Errorf("after update --resources the memory limit is %s", got)
	}
	if got := lim("pids"); got != "3" {
		t.Errorf("after update --resources the pids limit is %s", got)
	}
	// The init, sleep and the exec'd sh are the three: sh cannot fork.
	if out, _, code := rt(t, root, "exec", "u1", "/bin/sh", "-c", "/bin/true && echo forked"); code == 0 || strings.Contains(out, "forked") {
		t.Errorf("a fork over the lowered pids limit: exit %d: %q", code, out)
	}
}

// TestUpdateRefusesWhatMoatDoesNotEnforce: a limit moat does not enforce
// is refused naming it, as is a --resources field that is not
// linux.resources' (a unified key that climbs out of the leaf among
// them), flags beside --resources, and a container without a leaf; the
// limits stay as they were.
func TestUpdateRefusesWhatMoatDoesNotEnforce(t *testing.T) {
	root := t.TempDir()
	spec := sleeper(t)
	withLeaf(t, spec)
	running(t, root, "u2", spec)
	res := func(s string) string {
		p := t.TempDir() + "/r.json"
		if err := writeFile(p, s); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cpuset-cpus", "0"}, "cpu.cpus"},
		{[]string{"--blkio-weight", "100"}, "blockIO"},
		{[]string{"--memory-reservation", "10m"}, "memory.reservation"},
		{[]string{"--cpu-rt-runtime", "1000"}, "cpu.realtimeRuntime"},
		{[]string{"--l3-cache-schema", "L3:0=f"}, "Intel RDT"},
		{[]string{"--memory", "lots"}, "--memory"},
		{[]string{"--memory", "64m", "--memory-swap", "32m"}, "below memory.limit"},
		{[]string{"--resources", res(`{"unified":{"../../pids.max":"1"}}`)}, "unified"},
		{[]string{"--resources", res(`{"memroy":{"limit":1}}`)}, `unknown field "memroy"`},
		{[]string{"--resources", res(`{"pids":{"limit":5}}`), "--memory", "1m"}, "not as flags beside it"},
		{[]string{"--pids-limit", "5", "--cpu-quota", "10"}, "cpu.quota"},
	} {
		_, errs, code := rt(t, root, append(append([]string{"update"}, c.args...), "u2")...)
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("update %v: exit %d: %s (want %q)", c.args, code, errs, c.want)
		}
	}
	if got := limitOf(t, ociState(t, root, "u2").Pid, "pids"); got != "64" {
		t.Errorf("after the refused updates pids.max = %s, want 64", got)
	}
	if _, errs, code := rt(t, root, "kill", "u2", "KILL"); code != 0 {
		t.Fatalf("kill: %s", errs)
	}
	waitStatus(t, root, "u2", specs.StateStopped)
	if _, errs, code := rt(t, root, "update", "--pids-limit", "5", "u2"); code != 1 || !strings.Contains(errs, "container not running") {
		t.Errorf("update of a stopped container: exit %d: %s", code, errs)
	}
}

// TestUpdateWithoutALeafAsNobody: a container moat made no leaf for (no
// limits; nobody gets none on this host) is refused an update, saying why.
func TestUpdateWithoutALeafAsNobody(t *testing.T) {
	asNobody(t, func(t *testing.T) {
		root := t.TempDir()
		running(t, root, "u3", sleeper(t))
		if _, errs, code := rt(t, root, "update", "--pids-limit", "5", "u3"); code != 1 || !strings.Contains(errs, "has no cgroup of its own") {
			t.Errorf("update without a leaf: exit %d: %s", code, errs)
		}
	})
}

// TestRAMBytes: --memory and its kin read runc's sizes (binary units).
func TestRAMBytes(t *testing.T) {
	for in, want := range map[string]int64{"-1": -1, "1024": 1024, "64m": 64 << 20, "64MiB": 64 << 20, "1.5g": 3 << 29, "2 kb": 2048, "1T": 1 << 40} {
		if got, err := ramBytes(in); err != nil || got != want {
			t.Errorf("ramBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-2", "1x", "99999999999p"} {
		if _, err := ramBytes(in); err == nil {
			t.Errorf("ramBytes(%q) accepted", in)
		}
	}
}

// TestUpdateResourcesFromFlags: runc's flags fill linux.resources, and
// --memory-swap does not turn swap on (swapOff).
func TestUpdateResourcesFromFlags(t *testing.T) {
	res, err := updateResources(map[string]string{"memory": "128m", "memory-swap": "256m", "pids-limit": "7",
		"cpu-quota": "20000", "cpu-period": "40000", "cpu-share": "512"}, nil)
	if err == nil {
		err = swapOff(res)
	}
	if err != nil {
		t.Fatal(err)
	}
	if *res.Memory.Limit != 128<<20 || res.Memory.Swap != nil || *res.Pids.Limit != 7 || *res.CPU.Quota != 20000 ||
		*res.CPU.Period != 40000 || *res.CPU.Shares != 512 {
		t.Errorf("resources %+v %+v %+v", res.Memory, res.Pids, res.CPU)
	}
	if _, err := updateResources(map[string]string{"pids-limit": "many"}, nil); err == nil || !strings.Contains(err.Error(), "--pids-limit") {
		t.Errorf("--pids-limit many: %v", err)
	}
	res, err = updateResources(map[string]string{"resources": "-"}, strings.NewReader(`{"cpu":{"quota":30000}}`))
	if err != nil || *res.CPU.Quota != 30000 {
		t.Errorf("--resources -: %+v, %v", res, err)
	}
}
