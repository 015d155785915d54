//go:build linux

package nsexec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func init() {
	probes["toponly"] = probeTopOnly
}

// TestTopOnlyReadOnly: with ReadOnlyTopOnly (moat-runtime's, runc's "ro"),
// a bind's "ro" is of its top mount alone, its submount (a tmpfs below the
// source) stays writable, and "rro" reaches the submount too; without it
// (moat run, the library) "ro" is recursive. Hostile: a tool holding
// every capability of its user namespace, with no filter, can neither
// write the top-only read-only mount nor make it writable (MS_REMOUNT,
// mount_setattr clearing MOUNT_ATTR_RDONLY): as root the parent's copy of
// the source is read-only, and that flag is locked in the sandbox's mount
// namespace. The same holds for a tool without capabilities.
func TestTopOnlyReadOnly(t *testing.T) {
	rootOnly(t)
	// The volumes below the sources are mounted in a copy of this
	// binary in a mount namespace of its own, never on the host's.
	if testenv.InPrivateMounts(t) {
		return
	}
	base := t.TempDir()
	os.Chmod(base, 0o755)
	// Two sources, one for "ro" and one for "rro": two binds of one
	// source share the parent's one locked copy, read-only in every mount
	// where any of them asks it (idmount_linux.go idUse.topOnly).
	var srcs [2]string
	for i := range srcs {
		srcs[i] = filepath.Join(base, fmt.Sprint("src", i))
		sub := filepath.Join(srcs[i], "sub")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=64k,mode=1777"); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(sub, unix.MNT_DETACH)
		os.Chmod(srcs[i], 0o777) // the top is writable but for its mount's flag
	}
	src := srcs[0]

	last, err := lastCap()
	if err != nil {
		t.Fatal(err)
	}
	all := uint64(1)<<(last+1) - 1
	for _, c := range []struct {
		name    string
		topOnly bool
		caps    bool
		want    map[string]string
	}{
		{"top-only, every capability", true, true, map[string]string{
			"write-ro": "EROFS", "write-ro-sub": "ok", "write-rro-sub": "EROFS",
			"remount-ro-rw": "EPERM", "setattr-clear-rdonly": "EPERM", "write-ro-after": "EROFS"}},
		{"top-only, no capability", true, false, map[string]string{
			"write-ro": "EROFS", "write-ro-sub": "ok", "write-rro-sub": "EROFS",
			"remount-ro-rw": "EPERM", "setattr-clear-rdonly": "EPERM", "write-ro-after": "EROFS"}},
		{"recursive (moat's rule)", false, true, map[string]string{
			"write-ro": "EROFS", "write-ro-sub": "EROFS", "write-rro-sub": "EROFS",
			"remount-ro-rw": "EPERM", "setattr-clear-rdonly": "EPERM", "write-ro-after": "EROFS"}},
	} {
		cfg := probeConfig(t, "toponly")
		cfg.UID, cfg.GID, cfg.ExactIDs = 0, 0, true
		cfg.ReadOnlyTopOnly = c.topOnly
		if c.caps {
			cfg.Caps = &Capabilities{Bounding: all, Permitted: all, Effective: all}
		}
		cfg.Mounts = append(cfg.Mounts,
			specs.Mount{Source: src, Destination: "/ro", Options: []string{"rbind", "ro"}},
			specs.Mount{Source: srcs[1], Destination: "/rro", Options: []string{"rbind", "rro"}})
		outR, outW, _ := os.Pipe()
		p, err := Start(context.Background(), cfg, Stdio{Stdout: outW, Stderr: outW}, rangeSpace(t, 1))
		outW.Close()
		if err != nil {
			outR.Close()
			t.Fatalf("%s: %v", c.name, err)
		}
		line, _ := bufio.NewReader(outR).ReadString('\n')
		outR.Close()
		p.Wait()
		var got map[string]string
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("%s: the probe said %q: %v", c.name, line, err)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s: %s, want %s", c.name, k, got[k], v)
			}
		}
		if _, err := os.Stat(filepath.Join(src, "planted")); err == nil {
			t.Fatalf("%s: the tool wrote the read-only top mount's source", c.name)
		}
		os.Remove(filepath.Join(src, "sub", "planted"))
	}
}

// probeTopOnly tries to write the read-only binds at /ro ("ro") and /rro
// ("rro") and below them in their submount, and to make /ro writable, and
// prints what each attempt returned as JSON.
func probeTopOnly() error {
	res := map[string]string{}
	try := func(name string, err error) { res[name] = errnoName(err) }
	try("write-ro", os.WriteFile("/ro/planted", []byte("x"), 0o644))
	try("write-ro-sub", os.WriteFile("/ro/sub/planted", []byte("x"), 0o644))
	try("write-rro-sub", os.WriteFile("/rro/sub/planted-r", []byte("x"), 0o644))
	try("remount-ro-rw", unix.Mount("", "/ro", "", unix.MS_REMOUNT|unix.MS_BIND, ""))
	if fd, err := unix.OpenTree(unix.AT_FDCWD, "/ro", unix.OPEN_TREE_CLOEXEC); err == nil {
		try("setattr-clear-rdonly", unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}))
		unix.Close(fd)
	} else {
		try("setattr-clear-rdonly", err)
	}
	try("write-ro-after", os.WriteFile("/ro/planted", []byte("x"), 0o644))
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
