package nsexec

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// TestCgroupTasksJoinsTheLeaf: with WithCgroupTasks the tool runs inside
// the cgroup v1 leaf, and with CgroupNS that leaf is its namespace root.
func TestCgroupTasksJoinsTheLeaf(t *testing.T) {
	testenv.RequireRoot(t)
	hier := "/sys/fs/cgroup/pids"
	var st unix.Statfs_t
	if err := unix.Statfs(hier, &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
		t.Skipf("no cgroup v1 pids hierarchy at %s (a v2 host; CLONE_INTO_CGROUP places the child there)", hier)
	}
	leaf := filepath.Join(hier, "moat-nsexec-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(leaf) })
	open := func() *os.File {
		f, err := os.OpenFile(filepath.Join(leaf, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}

	r := mustRun(t, shell(t, "cat /proc/self/cgroup; ls -l /proc/self/fd | grep -c tasks || true"), WithCgroupTasks(open()))
	want := "pids:/" + filepath.Base(leaf) + "\n"
	if !strings.Contains(r.stdout, want) {
		t.Fatalf("the tool's cgroups:\n%s\nwant the line %q", r.stdout, want)
	}
	if !strings.HasSuffix(r.stdout, "0\n") {
		t.Fatalf("a tasks descriptor leaked into the tool:\n%s", r.stdout)
	}

	cfg := shell(t, "cat /proc/self/cgroup")
	cfg.CgroupNS = true
	r = mustRun(t, cfg, WithCgroupTasks(open()))
	if !strings.Contains(r.stdout, "pids:/\n") {
		t.Fatalf("with a cgroup namespace the leaf should be the tool's root:\n%s", r.stdout)
	}
}

// TestCgroupTasksFailClosed: a child that cannot join its leaf never runs
// the tool; the start fails with a SetupError of step cgroup.
func TestCgroupTasksFailClosed(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		ro, err := os.Open(os.DevNull) // read-only: the write of "0" fails
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		cfg := shell(t, "touch /work/ran")
		_, err = run(t, cfg, WithCgroupTasks(ro))
		setupErr(t, err, StepCgroup, unix.EBADF)
		if _, err := os.Stat(filepath.Join(cfg.Workdir, "ran")); err == nil {
			t.Fatal("the tool ran although joining the cgroup failed")
		}
	})
}
