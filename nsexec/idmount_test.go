//go:build linux

package nsexec

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// volume makes base/vol, root's with mode 0755 and a root-owned file and
// a directory of uid 1000 in it, and base/other beside it; base is 0755.
func volume(t *testing.T) (base, vol string) {
	t.Helper()
	base = t.TempDir()
	os.Chmod(base, 0o755)
	vol = filepath.Join(base, "vol")
	os.Mkdir(vol, 0o755)
	os.WriteFile(filepath.Join(vol, "existing"), []byte("root's"), 0o644)
	os.Mkdir(filepath.Join(vol, "app"), 0o755)
	os.Chown(filepath.Join(vol, "app"), 1000, 1000)
	os.Mkdir(filepath.Join(base, "other"), 0o755)
	return base, vol
}

// snapshot lists every path below dir but skip with its owner and mode.
func snapshot(t *testing.T, dir, skip string) string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if p == skip {
			return filepath.SkipDir
		}
		st := fi.Sys().(*syscall.Stat_t)
		out = append(out, fmt.Sprintf("%s %v %d:%d", p, fi.Mode(), st.Uid, st.Gid))
		return nil
	})
	return strings.Join(out, "\n")
}

// checkVolume runs a sandbox (uid 0, then uid 1000) on vol bound rw at
// /vol with opts and checks what the brief of an id-mapped volume says:
// inside, the volume's owners show as on the host; container root writes
// the root-owned 0755 volume, and uid 1000 its own directory; on the host
// what they wrote is owned by root and by 1000, the ids of the same
// numbers; nothing outside the volume changed, and no mount is left in
// the host's table or thread of this process outside its mount namespace.
func checkVolume(t *testing.T, base, vol string, mount specs.Mount, opts ...Option) {
	t.Helper()
	before := snapshot(t, base, vol)
	mountsBefore := hostMounts(t, base)
	cfg := shell(t, "stat -c %u:%g /vol /vol/existing /vol/app; mkdir /vol/newdir && echo hi > /vol/newfile && echo wrote")
	cfg.UID, cfg.GID, cfg.ExactIDs = 0, 0, true
	cfg.Mounts = []specs.Mount{mount}
	r := mustRun(t, cfg, opts...)
	if r.stdout != "0:0\n0:0\n1000:1000\nwrote\n" {
		t.Fatalf("container root: %q (stderr %q), want the volume's owners as on the host and the write done", r.stdout, r.stderr)
	}
	cfg = shell(t, "echo mine > /vol/app/mine && echo wrote; echo no > /vol/not-mine 2>/dev/null || echo refused")
	cfg.UID, cfg.GID = 1000, 1000
	cfg.Mounts = []specs.Mount{mount}
	if r := mustRun(t, cfg, opts...); r.stdout != "wrote\nrefused\n" {
		t.Fatalf("uid 1000: %q (stderr %q), want its own directory writable and root's not", r.stdout, r.stderr)
	}
	for name, want := range map[string]uint32{"newdir": 0, "newfile": 0, "app/mine": 1000} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(vol, name), &st); err != nil || st.Uid != want || st.Gid != want {
			t.Errorf("on the host %s is owned by %d:%d (%v), want %d:%d", name, st.Uid, st.Gid, err, want, want)
		}
	}
	var st unix.Stat_t
	if unix.Stat(vol, &st); st.Uid != 0 || st.Mode&0o7777 != 0o755 {
		t.Errorf("the volume itself is now %d mode %#o", st.Uid, st.Mode&0o7777)
	}
	if after := snapshot(t, base, vol); after != before {
		t.Errorf("outside the volume:\nbefore\n%s\nafter\n%s", before, after)
	}
	if after := hostMounts(t, base); after != mountsBefore {
		t.Errorf("the host's mount table below %s changed: %q, was %q", base, after, mountsBefore)
	}
	// While a sandbox runs, its spawning thread (kept for its life) is
	// back in the host's mount namespace, like every other.
	sleeper := shell(t, "exec sleep 60")
	sleeper.Mounts = []specs.Mount{mount}
	p, err := Start(context.Background(), sleeper, Stdio{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Signal(syscall.SIGKILL); p.Wait() }()
	self, _ := os.Readlink("/proc/self/ns/mnt")
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		if ns, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/mnt"); err == nil && ns != self {
			t.Errorf("thread %s of the launcher stayed in mount namespace %s (the process's is %s)", task.Name(), ns, self)
		}
	}
}

// TestIDMappedVolume: with WithIDMappedMounts (a config with no user
// namespace of its own, as podman as root without --userns gives) a bind
// of a root-owned 0755 host directory is id-mapped with the sandbox's
// range.
func TestIDMappedVolume(t *testing.T) {
	rootOnly(t)
	base, vol := volume(t)
	checkVolume(t, base, vol, specs.Mount{Source: vol, Destination: "/vol", Options: []string{"rw"}},
		rangeSpace(t, 1), WithIDMappedMounts())
}

// TestIDMappedVolumeExplicit: a config's own maps (podman --userns=auto,
// a pod with hostUsers: false) and a bind with the same maps of its own
// (the CRI's, podman's :idmap) give the same.
func TestIDMappedVolumeExplicit(t *testing.T) {
	rootOnly(t)
	base, vol := volume(t)
	m := []IDMap{{Inside: 0, Host: 300000, Size: 65536}}
	lm := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 300000, Size: 65536}}
	checkVolume(t, base, vol, specs.Mount{Source: vol, Destination: "/vol", Options: []string{"rw", "idmap"}, UIDMappings: lm, GIDMappings: lm},
		WithIDMaps(m, m))
}

// Without an id map the same volume is nobody's inside and container root
// cannot write it: what the id-mapped mount is for.
func TestPlainVolumeNotWritable(t *testing.T) {
	rootOnly(t)
	_, vol := volume(t)
	cfg := shell(t, "stat -c %u /vol; echo x > /vol/newfile 2>/dev/null || echo refused")
	cfg.UID, cfg.GID, cfg.ExactIDs = 0, 0, true
	cfg.Mounts = []specs.Mount{{Source: vol, Destination: "/vol", Options: []string{"rw"}}}
	if r := mustRun(t, cfg, rangeSpace(t, 1)); r.stdout != "65534\nrefused\n" {
		t.Fatalf("plain bind: %q, want the overflow owner and the write refused", r.stdout)
	}
}

// A filesystem that cannot be id-mapped (sysfs): WithIDMappedMounts keeps
// it a plain bind and the sandbox runs; a bind that asks for its own maps
// there is refused naming the id-mapped mount. Rootless, a bind's own
// maps are refused before anything is spawned.
func TestIDMappedUnsupported(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		lm := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 300000, Size: 65536}}
		explicit := specs.Mount{Source: "/sys/kernel", Destination: "/mnt", Options: []string{"ro"}, UIDMappings: lm, GIDMappings: lm}
		cfg := &Config{Args: []string{"/bin/true"}, ExactIDs: true, Mounts: []specs.Mount{explicit}}
		if !IsHostRoot() {
			_, err := Start(context.Background(), cfg, Stdio{})
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "rootless") {
				t.Fatalf("rootless id-mapped bind: %v, want a ConfigError", err)
			}
			return
		}
		m := []IDMap{{Inside: 0, Host: 300000, Size: 65536}}
		_, err := Start(context.Background(), cfg, Stdio{}, WithIDMaps(m, m))
		se := setupErr(t, err, StepBind, unix.EINVAL)
		if !strings.Contains(se.Detail, "id-mapped") || se.Hint == "" {
			t.Fatalf("sysfs with its own maps: %v, want the id-mapped mount named with a hint", err)
		}
		plain := shell(t, "stat -c %u /mnt")
		plain.UID, plain.GID, plain.ExactIDs = 0, 0, true
		plain.Mounts = []specs.Mount{{Source: "/sys/kernel", Destination: "/mnt", Options: []string{"ro"}}}
		if r := mustRun(t, plain, rangeSpace(t, 1), WithIDMappedMounts()); r.stdout != "65534\n" {
			t.Fatalf("sysfs with WithIDMappedMounts: %q, want a plain bind (owner nobody)", r.stdout)
		}
		// Granted CAP_SYS_ADMIN, the plain bind's read-only flag is
		// locked all the same.
		sa := mustCaps("CAP_SYS_ADMIN")
		plain.Args = []string{"/bin/sh", "-c", "mount -o remount,bind,rw /mnt 2>/dev/null && echo remounted || echo locked"}
		plain.Caps = &Capabilities{Bounding: sa, Permitted: sa, Effective: sa}
		if r := mustRun(t, plain, rangeSpace(t, 1), WithIDMappedMounts()); r.stdout != "locked\n" {
			t.Fatalf("sysfs with WithIDMappedMounts and CAP_SYS_ADMIN: %q, want the read-only bind locked", r.stdout)
		}
	})
}

// TestIDMappedFlagsLocked: through an id-mapped mount container root acts
// as host root on the source's files, so the mount's flags must hold
// against a sandbox granted CAP_SYS_ADMIN with no filter: the read-only
// volume cannot be made writable (MS_REMOUNT, mount_setattr) nor its
// nodev cleared, and no file lands in it.
func TestIDMappedFlagsLocked(t *testing.T) {
	rootOnly(t)
	base, ro := volume(t)
	w := filepath.Join(base, "other")
	last, err := lastCap()
	if err != nil {
		t.Fatal(err)
	}
	all := uint64(1)<<(last+1) - 1
	cfg := probeConfig(t, "caps-hostile")
	cfg.UID, cfg.GID, cfg.ExactIDs = 0, 0, true
	cfg.Caps = &Capabilities{Bounding: all, Permitted: all, Effective: all}
	cfg.Mounts = append(cfg.Mounts,
		specs.Mount{Source: w, Destination: "/w", Options: []string{"rw"}},
		specs.Mount{Source: ro, Destination: "/ro", Options: []string{"ro"}})
	outR, outW, _ := os.Pipe()
	p, err := Start(context.Background(), cfg, Stdio{Stdout: outW, Stderr: outW}, rangeSpace(t, 1), WithIDMappedMounts())
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(outR).ReadString('\n')
	outR.Close()
	p.Wait()
	var got map[string]string
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("probe said %q: %v", line, err)
	}
	for k, v := range map[string]string{
		"remount-ro-bind-rw":   "EPERM",
		"setattr-clear-rdonly": "EPERM",
		"setattr-clear-nodev":  "EPERM",
		"write-ro-bind":        "EROFS",
		"write-root-owned-dir": "ok", // the id-mapped rw volume is root's inside
		"mknod-block":          "EPERM",
	} {
		if got[k] != v {
			t.Errorf("%s: %q, want %s", k, got[k], v)
		}
	}
	if entries, _ := os.ReadDir(ro); len(entries) != 2 {
		t.Errorf("the read-only volume now holds %v", entries)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(w, "by-root"), &st); err != nil || st.Uid != 0 {
		t.Errorf("what container root wrote in the id-mapped rw volume: owner %d (%v), want host root", st.Uid, err)
	}
}
