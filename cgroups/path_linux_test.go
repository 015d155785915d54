package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/conformance/testenv"
)

// pathHost detects the host for the cgroupsPath tests, which need root
// and v1 (this development host is hybrid) or v2.
func pathHost(t *testing.T) *Host {
	t.Helper()
	testenv.RequireRoot(t)
	h, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if h.Layout == NoCgroups {
		testenv.Skipf(t, "no cgroup filesystem is mounted")
	}
	return h
}

// groupOf is pid's group in the hierarchy of controller c ("" for v2's).
func groupOf(t *testing.T, pid int, c string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && ((c == "" && f[0] == "0") || (c != "" && strings.Contains(","+f[1]+",", ","+c+","))) {
			return f[2]
		}
	}
	return ""
}

// dirsOf resolves path as CreatePath does, for the checks.
func dirsOf(t *testing.T, h *Host, path string) []string {
	t.Helper()
	_, dirs, err := pathDirs(h, path)
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// cleanupPath removes whatever the test left below top in every hierarchy.
func cleanupPath(t *testing.T, h *Host, top string) {
	t.Cleanup(func() {
		for _, d := range dirsOf(t, h, top) {
			removeTree(t, d)
			rmdir(d)
		}
	})
}

// TestCreatePath: the group is exactly at the cgroupsPath, absolute from
// each hierarchy's root and relative from this process's own group, in
// every hierarchy moat uses; the limits are written there; a process put
// in it lives there; Delete removes the levels CreatePath made, and no
// level that was there before (an engine's parent group).
func TestCreatePath(t *testing.T) {
	h := pathHost(t)
	for _, abs := range []bool{true, false} {
		t.Run(map[bool]string{true: "absolute", false: "relative"}[abs], func(t *testing.T) {
			engine := testParent("path")
			if abs {
				engine = "/" + engine
			}
			cleanupPath(t, h, engine)
			// The engine's parent exists before; the levels below it do not.
			for _, d := range dirsOf(t, h, engine) {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			path := engine + "/pod/ctr"
			res := limitsOf(64<<20, 42, 0.5)
			// On v2 a relative path is below this process's own group,
			// which holds processes: no controller can be enabled below it
			// (the no-internal-process rule; runc meets the same).
			v2rel := h.Layout == Unified && !abs
			if v2rel {
				res = nil
			}
			leaf, err := CreatePath(path, res)
			if err != nil {
				t.Fatalf("CreatePath: %v", err)
			}
			dirs := dirsOf(t, h, path)
			for _, d := range dirs {
				if !exists(d) {
					t.Errorf("%s was not created", d)
				}
			}
			switch {
			case v2rel:
			case h.Layout == Unified:
				if v, _ := os.ReadFile(filepath.Join(dirs[0], "pids.max")); strings.TrimSpace(string(v)) != "42" {
					t.Errorf("pids.max = %q, want 42", v)
				}
			default:
				for c, file := range map[string]string{"pids": "pids.max", "memory": "memory.limit_in_bytes"} {
					want := map[string]string{"pids": "42", "memory": strconv.Itoa(64 << 20)}[c]
					mnt := h.V1[c]
					if mnt == "" {
						continue
					}
					d := filepath.Join(mnt, path)
					if !abs {
						d = filepath.Join(h.Self[c], path)
					}
					if v, _ := os.ReadFile(filepath.Join(d, file)); strings.TrimSpace(string(v)) != want {
						t.Errorf("%s/%s = %q, want %s", d, file, v, want)
					}
				}
			}
			s := startIn(t, leaf, helper(t, "sleep", "30s"))
			pid := s.cmd.Process.Pid
			controllers := []string{""}
			if h.Layout != Unified {
				controllers = nil
				for _, c := range pathV1Controllers {
					if h.V1[c] != "" {
						controllers = append(controllers, c)
					}
				}
			}
			for _, c := range controllers {
				got := groupOf(t, pid, c)
				if abs && got != path || !abs && !strings.HasSuffix(got, "/"+path) {
					t.Errorf("the process's %q group is %q, want %s", c, got, path)
				}
			}
			// The monitor's view: OpenPath with what CreatePath made.
			made := leaf.Made()
			other, err := OpenPath(path, made)
			if err != nil {
				t.Fatalf("OpenPath: %v", err)
			}
			if err := other.Delete(); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			for _, d := range dirs {
				if exists(d) || exists(filepath.Dir(d)) {
					t.Errorf("%s (or its pod level) left after Delete", d)
				}
				if !exists(filepath.Dir(filepath.Dir(d))) {
					t.Errorf("the engine's group %s was removed: moat did not create it", filepath.Dir(filepath.Dir(d)))
				}
			}
			if err := s.cmd.Wait(); killedBy(err) != unix.SIGKILL {
				t.Errorf("the process in the group: %v, want killed by Delete", err)
			}
		})
	}
}

// TestCreatePathDevices: the config's device rules are written in their
// order, so devices.list reads back as runtime-tools expects.
func TestCreatePathDevices(t *testing.T) {
	h := pathHost(t)
	if h.V1["devices"] == "" {
		t.Skip("no cgroup v1 devices hierarchy (cgroup v2 takes device rules as a BPF program, which moat does not load)")
	}
	path := "/" + testParent("dev")
	cleanupPath(t, h, path)
	n := func(v int64) *int64 { return &v }
	res := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"},
		{Allow: true, Type: "c", Major: n(10), Minor: n(229), Access: "rwm"},
		{Allow: true, Type: "b", Major: n(8), Minor: n(20), Access: "rw"},
		{Allow: true, Type: "c", Major: n(136), Access: "rwm"}}}
	leaf, err := CreatePath(path, res)
	if err != nil {
		t.Fatal(err)
	}
	defer leaf.Delete()
	b, err := os.ReadFile(filepath.Join(h.V1["devices"], path, "devices.list"))
	if want := "c 10:229 rwm\nb 8:20 rw\nc 136:* rwm\n"; err != nil || string(b) != want {
		t.Errorf("devices.list = %q (%v), want %q", b, err, want)
	}
}

// TestCreatePathRefusesHostile: a cgroupsPath that would leave the
// hierarchy, or names a group that is someone else's (processes or groups
// in it), or reaches its group through a mount (which could hold a
// symlink to another group), fails with a *PathError naming
// linux.cgroupsPath, and nothing is created or changed.
func TestCreatePathRefusesHostile(t *testing.T) {
	h := pathHost(t)
	for _, p := range []string{"", "/", ".", "/a/../../etc", "a/../..", "../x", "/a//b", "/a/./b", "a/"} {
		_, err := CreatePath(p, nil)
		var pe *PathError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "linux.cgroupsPath") {
			t.Errorf("CreatePath(%q): %v, want a *PathError naming linux.cgroupsPath", p, err)
		}
	}

	t.Run("populated", func(t *testing.T) {
		// Someone else's group, with a process in it: moat must neither
		// write its limits there nor (at Delete) kill what runs there.
		victim := "/" + testParent("victim")
		cleanupPath(t, h, victim)
		for _, d := range dirsOf(t, h, victim) {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		theirs, err := OpenPath(victim, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := startIn(t, theirs, helper(t, "sleep", "30s"))
		_, err = CreatePath(victim, limitsOf(0, 5, 0))
		var pe *PathError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "someone else's") {
			t.Fatalf("CreatePath into a populated group: %v, want a *PathError", err)
		}
		if unix.Kill(s.cmd.Process.Pid, 0) != nil {
			t.Error("the other group's process was killed")
		}
		if h.Layout != Unified {
			if v, _ := os.ReadFile(filepath.Join(h.V1["pids"], victim, "pids.max")); strings.TrimSpace(string(v)) != "max" {
				t.Errorf("the other group's pids.max became %q", v)
			}
		}
		// A group with a group of its own in it is someone else's too.
		parent := "/" + testParent("victim")
		cleanupPath(t, h, parent)
		for _, d := range dirsOf(t, h, parent) {
			if err := os.MkdirAll(filepath.Join(d, "child"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_, err = CreatePath(parent, nil)
		if !errors.As(err, &pe) {
			t.Errorf("CreatePath of a group holding a group: %v, want a *PathError", err)
		}
	})

	t.Run("mount-on-the-way", func(t *testing.T) {
		// Root mounts a tmpfs over a level (in a private mount namespace
		// of this thread alone) and plants there a symlink to another
		// group: the walk crosses no mount and follows no link.
		top := "/" + testParent("mnt")
		cleanupPath(t, h, top)
		dirs := dirsOf(t, h, top)
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(d, "mid"), 0o755); err != nil {
				t.Fatal(err)
			}
			os.Mkdir(filepath.Join(d, "target"), 0o755)
		}
		errc := make(chan error, 1)
		go func() {
			// The thread is never unlocked: it ends with the goroutine,
			// taking its mount namespace along.
			runtime.LockOSThread()
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				errc <- fmt.Errorf("unshare: %w", err)
				return
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				errc <- fmt.Errorf("make / private: %w", err)
				return
			}
			for _, d := range dirs {
				mid := filepath.Join(d, "mid")
				if err := unix.Mount("tmpfs", mid, "tmpfs", 0, ""); err != nil {
					errc <- fmt.Errorf("mount tmpfs: %w", err)
					return
				}
				if err := os.Symlink(filepath.Join(d, "target"), filepath.Join(mid, "ctr")); err != nil {
					errc <- err
					return
				}
			}
			_, err := CreatePath(top+"/mid/ctr", limitsOf(0, 7, 0))
			errc <- err
		}()
		err := <-errc
		var pe *PathError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "symlink, a mount") {
			t.Fatalf("CreatePath through a mount holding a symlink: %v, want a *PathError", err)
		}
		if h.Layout != Unified && h.V1["pids"] != "" {
			if v, _ := os.ReadFile(filepath.Join(h.V1["pids"], top, "target", "pids.max")); strings.TrimSpace(string(v)) != "max" {
				t.Errorf("the symlink's target got pids.max %q", v)
			}
		}
	})

	t.Run("made-outside-the-path", func(t *testing.T) {
		// The monitor removes only levels of its path: a made list that
		// names another group (a confused or forged handoff) is refused.
		path := "/" + testParent("own")
		cleanupPath(t, h, path)
		leaf, err := CreatePath(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer leaf.Delete()
		mnt := h.Unified
		if h.Layout != Unified {
			mnt = h.V1["pids"]
		}
		for _, m := range []string{filepath.Join(mnt, "system.slice"), mnt} {
			if _, err := OpenPath(path, []string{m}); !errors.As(err, new(*PathError)) {
				t.Errorf("OpenPath with made %s: %v, want a *PathError", m, err)
			}
		}
	})
}

// TestScopeOf: the systemd driver's slice:prefix:name becomes the scope
// systemd makes and its group, as runc expands it; anything that would
// name another place is a *PathError.
func TestScopeOf(t *testing.T) {
	for in, want := range map[string][2]string{
		"system.slice:libpod:abc": {"libpod-abc.scope", "/system.slice/libpod-abc.scope"},
		":moat:c1":                {"moat-c1.scope", "/system.slice/moat-c1.scope"},
		"kubepods-besteffort-pod12.slice:cri-containerd:abc": {"cri-containerd-abc.scope",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12.slice/cri-containerd-abc.scope"},
		"-.slice::x.scope":             {"x.scope", "/x.scope"},
		"machine.slice:libpod:c.scope": {"c.scope", "/machine.slice/c.scope"},
	} {
		unit, group, err := ScopeOf(in)
		if err != nil || unit != want[0] || group != want[1] {
			t.Errorf("ScopeOf(%q) = %q, %q, %v; want %q, %q", in, unit, group, err, want[0], want[1])
		}
	}
	for _, bad := range []string{"", "a:b", "/abs/path", "system.slice:p:../x", "system.slice:p:a/b", "../x.slice:p:n", "a--b.slice:p:n", "-a.slice:p:n", "notaslice:p:n", "system.slice:p:", "a:b:c:d"} {
		if _, _, err := ScopeOf(bad); !errors.As(err, new(*PathError)) {
			t.Errorf("ScopeOf(%q): %v, want a *PathError", bad, err)
		}
	}
}
