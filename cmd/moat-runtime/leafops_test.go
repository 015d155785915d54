package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// counter is a container that counts as fast as it can into /work/count,
// a volume of the host's; the directory is returned.
func counter(t *testing.T) (*specs.Spec, string) {
	t.Helper()
	vol := t.TempDir()
	os.Chmod(vol, 0o777) // the container's root is not the host's
	_, spec := bundle(t, "/bin/sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > /work/count.new; mv /work/count.new /work/count; done")
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/work", Type: "bind", Source: vol, Options: []string{"rbind", "rw"}})
	return spec, vol
}

// withLeaf gives spec a pids limit, so that moat makes the container a
// cgroup leaf of its own (which needs root on this host's cgroup v1).
func withLeaf(t *testing.T, spec *specs.Spec) {
	t.Helper()
	testenv.RequireRoot(t)
	limit := int64(64)
	spec.Linux.Resources = &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &limit}}
}

func count(t *testing.T, vol string) int {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(vol, "count"))
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// counts waits (a generous while) for the counter to pass from.
func counts(t *testing.T, vol string, from int) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if count(t, vol) > from {
			return true
		}
	}
	return false
}

func psJSON(t *testing.T, root, id string) []int {
	t.Helper()
	out, errs, code := rt(t, root, "ps", "--format", "json", id)
	if code != 0 {
		t.Fatalf("ps --format json %s: exit %d: %s", id, code, errs)
	}
	var pids []int
	if err := json.Unmarshal([]byte(out), &pids); err != nil {
		t.Fatalf("ps --format json: %v in %q", err, out)
	}
	return pids
}

// TestPauseFreezesTheContainer: pause stops a busy loop dead (its counter
// in a volume does not move however long it is left; the check waits
// without a tight bound), state says paused, and runc's refusals hold
// (pause of a paused one, resume of a running one, start, exec, delete
// without --force); resume lets it count again; delete --force ends a
// paused container.
func TestPauseFreezesTheContainer(t *testing.T) {
	root := t.TempDir()
	spec, vol := counter(t)
	withLeaf(t, spec)
	running(t, root, "p1", spec)
	if !counts(t, vol, 0) {
		t.Fatal("the counter does not count")
	}
	if _, errs, code := rt(t, root, "resume", "p1"); code != 1 || !strings.Contains(errs, "container not paused") {
		t.Errorf("resume of a running container: exit %d: %s", code, errs)
	}
	if _, errs, code := rt(t, root, "pause", "p1"); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errs)
	}
	if st := ociState(t, root, "p1"); st.Status != "paused" {
		t.Fatalf("state after pause: %s", st.Status)
	}
	n := count(t, vol)
	time.Sleep(500 * time.Millisecond)
	if m := count(t, vol); m != n {
		t.Fatalf("a paused container counted from %d to %d", n, m)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "p1"}, "container not running"},
		{[]string{"start", "p1"}, "cannot start a container in the paused state"},
		{[]string{"exec", "p1", "/bin/true"}, "cannot exec in a paused container"},
		{[]string{"delete", "p1"}, "cannot delete container p1 that is not stopped: paused"},
	} {
		if _, errs, code := rt(t, root, c.args...); code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%v on a paused container: exit %d: %s (want %q)", c.args, code, errs, c.want)
		}
	}
	if m := count(t, vol); m != n {
		t.Fatalf("the refusals let the paused container count from %d to %d", n, m)
	}
	if _, errs, code := rt(t, root, "resume", "p1"); code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	if st := ociState(t, root, "p1"); st.Status != specs.StateRunning {
		t.Fatalf("state after resume: %s", st.Status)
	}
	if !counts(t, vol, n) {
		t.Fatal("the resumed container does not count")
	}
	if _, errs, code := rt(t, root, "pause", "p1"); code != 0 {
		t.Fatalf("pause again: exit %d: %s", code, errs)
	}
	if _, errs, code := rt(t, root, "delete", "--force", "p1"); code != 0 {
		t.Fatalf("delete --force of a paused container: exit %d: %s", code, errs)
	}
	if _, errs, code := rt(t, root, "state", "p1"); code == 0 || !strings.Contains(errs, "does not exist") {
		t.Errorf("state after delete --force: exit %d: %s", code, errs)
	}
}

// TestKillEndsAPausedContainer: SIGKILL to a paused container ends it (a
// frozen v1 task dies only once thawed, which kill does, as runc's).
func TestKillEndsAPausedContainer(t *testing.T) {
	root := t.TempDir()
	spec := sleeper(t)
	withLeaf(t, spec)
	running(t, root, "k1", spec)
	if _, errs, code := rt(t, root, "pause", "k1"); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errs)
	}
	if _, errs, code := rt(t, root, "kill", "k1", "KILL"); code != 0 {
		t.Fatalf("kill KILL of a paused container: exit %d: %s", code, errs)
	}
	waitStatus(t, root, "k1", specs.StateStopped)
}

// TestPsListsTheContainer: ps --format json gives the host pids of the
// container's leaf, the init (state's pid) and its process among them and
// not the monitor; the table is the host's ps -ef cut to those pids, and
// the arguments after the ID go to ps.
func TestPsListsTheContainer(t *testing.T) {
	root := t.TempDir()
	spec := sleeper(t)
	withLeaf(t, spec)
	testPs(t, root, spec)
}

// TestPsWithoutALeafAsNobody: without a cgroup leaf (no limits; nobody
// has none on this host) ps lists the init and its descendants, and
// pause says why it cannot.
func TestPsWithoutALeafAsNobody(t *testing.T) {
	asNobody(t, func(t *testing.T) {
		root := t.TempDir()
		testPs(t, root, sleeper(t))
		if _, errs, code := rt(t, root, "pause", "ps1"); code != 1 || !strings.Contains(errs, "has no cgroup of its own") {
			t.Errorf("pause without a leaf: exit %d: %s", code, errs)
		}
		if st := ociState(t, root, "ps1"); st.Status != specs.StateRunning {
			t.Errorf("state after a refused pause: %s", st.Status)
		}
	})
}

func testPs(t *testing.T, root string, spec *specs.Spec) {
	t.Helper()
	initPid := running(t, root, "ps1", spec)
	var kids []int
	for deadline := time.Now().Add(10 * time.Second); len(kids) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		kids = childrenOf(t, initPid)
	}
	pids := psJSON(t, root, "ps1")
	if !slices.Contains(pids, initPid) || len(kids) == 0 || !slices.Contains(pids, kids[0]) {
		t.Fatalf("ps --format json = %v, want the init %d and its child %v", pids, initPid, kids)
	}
	b, _ := os.ReadFile(filepath.Join(root, "ps1", "state.json"))
	var st struct{ Monitor int }
	json.Unmarshal(b, &st)
	if st.Monitor == 0 || slices.Contains(pids, st.Monitor) {
		t.Errorf("ps --format json = %v lists the monitor %d (or state has none)", pids, st.Monitor)
	}
	out, errs, code := rt(t, root, "ps", "ps1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || !strings.HasPrefix(lines[0], "UID") || len(lines) != 1+len(pids) || !strings.Contains(out, "sleep 1000") {
		t.Fatalf("ps: exit %d: %q %s", code, out, errs)
	}
	out, errs, code = rt(t, root, "ps", "ps1", "-e", "-o", "pid,comm")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d sleep", kids[0])) || strings.Count(out, "\n") != 1+len(pids) {
		t.Fatalf("ps -e -o pid,comm: exit %d: %q %s", code, out, errs)
	}
	if _, errs, code := rt(t, root, "ps", "ps1", "-e", "-o", "comm"); code != 1 || !strings.Contains(errs, "no PID column") {
		t.Errorf("ps without a PID column: exit %d: %s", code, errs)
	}
}

// TestLeafOpsStayInTheirContainer: ps, pause, resume, events and update
// reach a container only through its own validated state directory: an
// ID with "..", a state directory that is a link to another container's,
// and one whose control socket is a link to another's are refused, and
// the container they aim at is left running, unfrozen.
func TestLeafOpsStayInTheirContainer(t *testing.T) {
	root := t.TempDir()
	spec, vol := counter(t)
	withLeaf(t, spec)
	running(t, root, "victim", spec)
	if err := os.Symlink("victim", filepath.Join(root, "linked")); err != nil {
		t.Fatal(err)
	}
	forged := filepath.Join(root, "forged")
	if err := os.Mkdir(forged, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "victim", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(forged, "state.json"), b, 0o600)
	if err := os.Symlink(filepath.Join(root, "victim", controlSocket), filepath.Join(forged, controlSocket)); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(res, []byte(`{"pids":{"limit":3}}`), 0o600)
	for _, id := range []string{"../" + filepath.Base(root) + "/victim", "linked", "forged"} {
		for _, args := range [][]string{{"pause", id}, {"resume", id}, {"ps", id}, {"ps", "--format", "json", id},
			{"events", "--stats", id}, {"update", "--resources", res, id}, {"update", "--pids-limit", "3", id}} {
			if out, errs, code := rt(t, root, args...); code == 0 {
				t.Errorf("%v: exit 0: %s %s", args, out, errs)
			}
		}
	}
	if st := ociState(t, root, "victim"); st.Status != specs.StateRunning {
		t.Fatalf("the victim is %s", st.Status)
	}
	if !counts(t, vol, count(t, vol)) {
		t.Fatal("the victim does not count: it was frozen")
	}
	if limit := limitOf(t, ociState(t, root, "victim").Pid, "pids"); limit != "64" {
		t.Fatalf("the victim's pids.max is %s, want 64", limit)
	}
}

// leafDir is the directory of pid's cgroup in a v1 controller's hierarchy,
// or the unified one on a v2 host.
func leafDir(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		dir := ""
		switch {
		case slices.Contains(strings.Split(f[1], ","), controller):
			dir = filepath.Join("/sys/fs/cgroup", f[1], f[2])
		case f[0] == "0" && f[1] == "" && unifiedHost():
			dir = filepath.Join("/sys/fs/cgroup", f[2])
		default:
			continue
		}
		return dir
	}
	t.Fatalf("no %s cgroup in %s", controller, b)
	return ""
}

func present(p string) bool { _, err := os.Stat(p); return err == nil }

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o600) }

// TestPausedCreatedStaysUnstarted: a created container can be paused (as
// under runc); its monitor refuses to start it while paused even when
// asked straight over the control socket (the CLI's own check bypassed),
// and resume returns it to created, from where it starts.
func TestPausedCreatedStaysUnstarted(t *testing.T) {
	root := t.TempDir()
	spec := sleeper(t)
	withLeaf(t, spec)
	if _, errs, code := rt(t, root, "create", "--bundle", writeBundle(t, spec), "c1"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { rt(t, root, "delete", "--force", "c1") })
	if _, errs, code := rt(t, root, "pause", "c1"); code != 0 {
		t.Fatalf("pause of a created container: exit %d: %s", code, errs)
	}
	err := request(filepath.Join(root, "c1", controlSocket), ctlRequest{Op: "start"})
	if err == nil || !strings.Contains(err.Error(), "cannot start a container in the paused state") {
		t.Fatalf("start asked of the monitor of a paused container: %v", err)
	}
	if st := ociState(t, root, "c1"); st.Status != "paused" {
		t.Fatalf("after the refused start: %s", st.Status)
	}
	if _, errs, code := rt(t, root, "resume", "c1"); code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	if st := ociState(t, root, "c1"); st.Status != specs.StateCreated {
		t.Fatalf("a resumed created container is %s", st.Status)
	}
	if _, errs, code := rt(t, root, "start", "c1"); code != 0 {
		t.Fatalf("start after resume: exit %d: %s", code, errs)
	}
	waitStatus(t, root, "c1", specs.StateRunning)
}

// TestPsFilter: the table keeps ps's header and the lines of the pids
// asked, by the PID column wherever it is, and needs one.
func TestPsFilter(t *testing.T) {
	out := "UID PID PPID CMD\nroot 1 0 init\nroot 12 1 sh\nroot 120 12 sleep\n"
	got, err := psFilter(out, []int{12, 120})
	if err != nil || got != "UID PID PPID CMD\nroot 12 1 sh\nroot 120 12 sleep\n" {
		t.Errorf("psFilter = %q, %v", got, err)
	}
	if _, err := psFilter("UID CMD\nroot init\n", []int{1}); err == nil || !strings.Contains(err.Error(), "no PID column") {
		t.Errorf("psFilter without a PID column: %v", err)
	}
}

// unifiedHost says whether this host's cgroups are v2 only.
func unifiedHost() bool { return present("/sys/fs/cgroup/cgroup.controllers") }

// limitOf reads one of the limits of pid's leaf, the same on v1 and v2:
// "memory" (bytes), "pids", "cpu" ("QUOTA PERIOD").
func limitOf(t *testing.T, pid int, kind string) string {
	t.Helper()
	read := func(controller, file string) string {
		v, err := os.ReadFile(filepath.Join(leafDir(t, pid, controller), file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(v))
	}
	switch {
	case kind == "memory" && unifiedHost():
		return read("memory", "memory.max")
	case kind == "memory":
		return read("memory", "memory.limit_in_bytes")
	case kind == "pids":
		return read("pids", "pids.max")
	case kind == "cpu" && unifiedHost():
		return read("cpu", "cpu.max")
	case kind == "cpu":
		return read("cpu", "cpu.cfs_quota_us") + " " + read("cpu", "cpu.cfs_period_us")
	}
	t.Fatalf("limitOf %s", kind)
	return ""
}

// swapOffIn says whether swap is accounted in pid's leaf, and if so
// whether it is off (v1 memory+swap equal to memory, v2 memory.swap.max
// 0).
func swapOffIn(t *testing.T, pid int) (accounted, off bool) {
	t.Helper()
	dir := leafDir(t, pid, "memory")
	if unifiedHost() {
		b, err := os.ReadFile(filepath.Join(dir, "memory.swap.max"))
		return err == nil, strings.TrimSpace(string(b)) == "0"
	}
	sw, err := os.ReadFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
	return err == nil, strings.TrimSpace(string(sw)) == limitOf(t, pid, "memory")
}
