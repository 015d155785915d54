package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestDeleteRemovesOrphanCgroup: when the monitor is killed, nothing
// removes the container's group at linux.cgroupsPath when the container
// ends; delete then removes it and the levels create made, from the
// record create kept (cgroup.json), in every hierarchy (v1's on this
// hybrid host), and leaves the engine's group above them. On main the
// group and its levels were left behind for good.
func TestDeleteRemovesOrphanCgroup(t *testing.T) {
	h := cgroupsPathHost(t)
	root := t.TempDir()
	engine := fmt.Sprintf("/moat-rt-orphan-%d", os.Getpid())
	engineGroup(t, h, engine)
	path := engine + "/pod/ctr"
	b, spec := bundle(t, "/bin/sleep", "100")
	spec.Linux.CgroupsPath = path
	b = writeBundle(t, spec)
	if _, errs, code := rt(t, root, "run", "--detach", "--bundle", b, "o1"); code != 0 {
		t.Fatalf("run --detach: exit %d: %s", code, errs)
	}
	defer rt(t, root, "delete", "--force", "o1")
	st := waitStatus(t, root, "o1", specs.StateRunning)
	want := hierarchies(h, path)
	for _, w := range want {
		if _, err := os.Stat(w[0]); err != nil {
			t.Fatalf("the container's group: %v", err)
		}
	}
	if err := unix.Kill(rawState(t, root, "o1").Monitor, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !gone(st.Pid, 10*time.Second) {
		t.Fatalf("the container's init %d outlived its killed monitor", st.Pid)
	}
	for _, w := range want {
		if _, err := os.Stat(w[0]); err != nil {
			t.Fatalf("the killed monitor's group %s is already gone (%v): the test shows nothing", w[0], err)
		}
	}
	if _, errs, code := rt(t, root, "delete", "o1"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, errs)
	}
	for _, w := range want {
		if _, err := os.Stat(filepath.Dir(w[0])); err == nil {
			t.Errorf("%s (made by create) is left after delete", filepath.Dir(w[0]))
		}
		if _, err := os.Stat(filepath.Dir(filepath.Dir(w[0]))); err != nil {
			t.Errorf("the engine's group %s went with delete: %v", filepath.Dir(filepath.Dir(w[0])), err)
		}
	}
}
