//go:build linux

package nsexec

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The hostile tests of issue 13 item 2: what moat does on the host with a
// caller's paths. Each runs as root and again as nobody.

// ownerMode is what a path's inode looked like.
type ownerMode struct {
	ino, uid, gid, mode uint64
}

func statOf(t *testing.T, path string) ownerMode {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return ownerMode{st.Ino, uint64(st.Uid), uint64(st.Gid), uint64(st.Mode)}
}

// plant runs a sandbox that leaves a symlink named name in its workdir,
// pointing at target on the host, as a hostile tool of an earlier run would.
func plant(t *testing.T, name, target string) string {
	t.Helper()
	cfg := shell(t, "ln -s "+target+" /work/"+name)
	os.Chmod(cfg.Workdir, 0o755) // the next run's caller walks through it
	mustRun(t, cfg)
	return filepath.Join(cfg.Workdir, name)
}

func TestWorkdirSymlinkPlantedAsLastComponentRefused(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		target := t.TempDir() // the caller's: what the link would hand over
		os.WriteFile(filepath.Join(target, "deploy.sh"), []byte("#!/bin/sh\n"), 0o755)
		before := statOf(t, target)
		link := plant(t, "evil", target)

		cfg := shell(t, "echo pwned > /work/deploy.sh; chmod 777 /work")
		cfg.Workdir = link
		_, err := run(t, cfg)
		se := setupErr(t, err, StepBind, unix.ELOOP)
		if se.Path != link || se.Hint == "" {
			t.Fatalf("error names %q (hint %q), want the link %q and a fix", se.Path, se.Hint, link)
		}
		if after := statOf(t, target); after != before {
			t.Fatalf("the link's target changed: %+v, was %+v", after, before)
		}
		if b, _ := os.ReadFile(filepath.Join(target, "deploy.sh")); string(b) != "#!/bin/sh\n" {
			t.Fatalf("deploy.sh was rewritten: %q", b)
		}
	})
}

func TestBindSourceSymlinkPlantedInParentRefused(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		secret := t.TempDir()
		os.Mkdir(filepath.Join(secret, "data"), 0o755)
		os.WriteFile(filepath.Join(secret, "data", "key"), []byte("secret"), 0o644)
		link := plant(t, "proj", secret) // the caller means <workdir>/proj/data
		for _, opt := range []string{"ro", "rw"} {
			cfg := shell(t, "cat /src/key")
			cfg.Mounts = []specs.Mount{{Source: filepath.Join(link, "data"), Destination: "/src", Options: []string{opt}}}
			r, err := run(t, cfg)
			if err == nil {
				t.Fatalf("%s bind through a planted symlink ran: %q", opt, r.stdout)
			}
			if se := setupErr(t, err, StepBind, unix.ELOOP); se.Detail == "" || !bytes.Contains([]byte(se.Detail), []byte(link)) {
				t.Fatalf("error does not name the symlink %s: %v", link, err)
			}
		}
	})
}

// TestRootfsSymlinkInPathRefused: the caller's own link to a rootfs is
// refused rootless (a sandbox writes as the caller, so it may be one's);
// as root, a link another user owns is.
func TestRootfsSymlinkInPathRefused(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		dir := t.TempDir()
		link := filepath.Join(dir, "root")
		os.Symlink("/", link)
		if os.Geteuid() == 0 {
			if err := os.Lchown(link, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
		_, err := run(t, &Config{Rootfs: link, Args: []string{"/bin/true"}})
		if se := setupErr(t, err, StepRootfs, unix.ELOOP); !strings.Contains(se.Detail, link) {
			t.Fatalf("the error does not name the link: %v", err)
		}
	})
}

// TestRootsOwnLinksFollowed (issue 28 item 7): as root, a bind source, a
// rootfs and a workdir reached through root's own links in directories
// only root can write (as /var/run -> /run is) are followed, and the
// sandbox gets what they point to. The same links in a directory anyone
// may write are refused, and so is one another user owns, naming the link;
// nothing is written where they point.
func TestRootsOwnLinksFollowed(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	os.Chmod(base, 0o755)
	data := filepath.Join(base, "data")
	os.Mkdir(data, 0o755)
	os.WriteFile(filepath.Join(data, "key"), []byte("through root's link"), 0o644)
	os.Symlink("data", filepath.Join(base, "srclink"))
	os.Symlink("/", filepath.Join(base, "rootlink"))
	work := workdir(t)
	os.Symlink(work, filepath.Join(base, "worklink"))

	cfg := shell(t, "cat /src/key; echo ok > /work/out")
	cfg.Workdir = filepath.Join(base, "worklink")
	cfg.Mounts = []specs.Mount{{Source: filepath.Join(base, "srclink"), Destination: "/src", Options: []string{"ro"}}}
	r := mustRun(t, cfg)
	if r.stdout != "through root's link" {
		t.Fatalf("got %q %q", r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "ok\n" {
		t.Fatalf("the workdir behind root's link: %q %v", b, err)
	}
	mustRun(t, &Config{Rootfs: filepath.Join(base, "rootlink"), Args: []string{"/bin/true"}})

	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	os.Symlink(work, filepath.Join(open, "worklink"))
	theirs := filepath.Join(base, "theirs")
	os.Symlink(work, theirs)
	os.Lchown(theirs, 65534, 65534)
	os.Remove(filepath.Join(work, "out"))
	for _, link := range []string{filepath.Join(open, "worklink"), theirs} {
		cfg := shell(t, "echo pwned > /work/out")
		cfg.Workdir = link
		_, err := run(t, cfg)
		if se := setupErr(t, err, StepBind, unix.ELOOP); !strings.Contains(se.Detail, link) {
			t.Fatalf("the error does not name the link %s: %v", link, err)
		}
		cfg = shell(t, "true")
		cfg.Mounts = []specs.Mount{{Source: filepath.Join(link, "x"), Destination: "/src", Options: []string{"ro"}}}
		_, err = run(t, cfg)
		setupErr(t, err, StepBind, unix.ELOOP)
	}
	if _, err := os.Lstat(filepath.Join(work, "out")); err == nil {
		t.Fatal("a sandbox wrote through a refused link")
	}
}

// TestSourceReplacedAfterOpenRefused is the racing variant: the child
// mounts only the inode the parent opened, so a source renamed over between
// the parent's open and the child's is refused.
func TestSourceReplacedAfterOpenRefused(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		dir := t.TempDir()
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		other := fileID{Dev: st.Dev, Ino: st.Ino + 1}
		if _, err := cloneSource(dir, &other, attrRO, true); err != unix.ESTALE {
			t.Fatalf("cloneSource of another inode: %v, want ESTALE", err)
		}
		if _, err := cloneSource(dir, nil, attrRO, true); err != unix.EPROTO {
			t.Fatalf("cloneSource without the parent's inode: %v, want EPROTO", err)
		}
	})
}

// TestWorkdirLentAndGivenBack is the launcher case: a fresh, empty 0700
// workdir of the caller's. As root the sandbox's host id gets it for the
// run; afterwards it has the owner, mode and ACLs it had, whatever the tool
// did to it. Rootless nothing is lent.
func TestWorkdirLentAndGivenBack(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		cfg := shell(t, "echo out > /work/result && chmod 6777 /work && "+
			"(python3 -c 'import os,sys; os.setxattr(\"/work\", \"system.posix_acl_default\", bytes.fromhex(sys.argv[1]))' "+aclHex(1000)+" 2>/dev/null; true) && echo ok")
		before := statOf(t, cfg.Workdir)
		r := mustRun(t, cfg)
		if r.stdout != "ok\n" {
			t.Fatalf("got %q %q", r.stdout, r.stderr)
		}
		after := statOf(t, cfg.Workdir)
		if os.Geteuid() == 0 && after != before {
			t.Fatalf("workdir left as %+v, found as %+v", after, before)
		}
		if os.Geteuid() == 0 {
			if _, err := getXattrPath(cfg.Workdir, "system.posix_acl_default"); err == nil {
				t.Fatal("the tool's default ACL outlived the run")
			}
		}
		if b, err := os.ReadFile(filepath.Join(cfg.Workdir, "result")); err != nil || string(b) != "out\n" {
			t.Fatalf("the tool's result: %q, %v", b, err)
		}
	})
}

// aclHex is a POSIX ACL xattr granting uid rwx (linux/posix_acl_xattr.h).
func aclHex(uid uint32) string {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	entry := func(tag, perm uint16, id uint32) {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint16(b, perm)
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	entry(0x01, 7, ^uint32(0)) // user obj
	entry(0x02, 7, uid)        // named user
	entry(0x04, 7, ^uint32(0)) // group obj
	entry(0x10, 7, ^uint32(0)) // mask
	entry(0x20, 7, ^uint32(0)) // other
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}

func getXattrPath(path, name string) ([]byte, error) {
	b := make([]byte, 256)
	n, err := unix.Getxattr(path, name, b)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}

// TestWorkdirNotEmptyNotWritableRefused: as root, a directory of the
// caller's with entries the sandbox's host id cannot write is refused, not
// handed over; the entries stay as they were.
func TestWorkdirNotEmptyNotWritableRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root only: rootless, the sandbox is the caller's own uid")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	deploy := filepath.Join(dir, "deploy.sh")
	os.WriteFile(deploy, []byte("#!/bin/sh\n"), 0o755)
	before, file := statOf(t, dir), statOf(t, deploy)
	cfg := shell(t, "echo pwned > /work/deploy.sh; chmod 777 /work")
	cfg.Workdir = dir
	_, err := run(t, cfg)
	se := setupErr(t, err, StepBind, unix.EACCES)
	if !bytes.Contains([]byte(se.Hint), []byte("empty directory")) {
		t.Fatalf("the error names no fix: %v", err)
	}
	if statOf(t, dir) != before || statOf(t, deploy) != file {
		t.Fatal("the refused workdir or its entry changed")
	}

	// Writable by everyone: used as it is, and the root-owned entry is
	// still only what its own mode lets the sandbox's uid do.
	os.Chmod(dir, 0o1777)
	before = statOf(t, dir)
	r, err := run(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if statOf(t, dir) != before || statOf(t, deploy) != file {
		t.Fatalf("the tool changed a root-owned entry or the directory: %q", r.stderr)
	}
	if b, _ := os.ReadFile(deploy); string(b) != "#!/bin/sh\n" {
		t.Fatalf("deploy.sh rewritten: %q", b)
	}
}

// TestWorkdirLentOnceAtATime is the racing variant: while one sandbox holds
// a lent workdir (and could plant a link in it), a second run neither
// borrows it too nor follows what was planted; the first one gets it back
// to its owner when it ends.
func TestWorkdirLentOnceAtATime(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T) {
		w := workdir(t)
		os.Chmod(w, 0o755)
		before := statOf(t, w)
		hostile := shell(t, "ln -s / /work/up; echo planted; exec sleep 30")
		hostile.Workdir = w
		// As root, both runs below that reach the lock share one pinned host
		// id; without the pin each sandbox has its own (hostid_linux.go).
		var pin []Option
		if os.Geteuid() == 0 {
			pin = []Option{WithIdentity(Identity{UID: HostIDFirst - 7, GID: HostIDFirst - 7})}
		}
		outR, outW, _ := os.Pipe()
		p, err := Start(context.Background(), hostile, Stdio{Stdout: outW}, pin...)
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Signal(unix.SIGKILL)
		buf := make([]byte, 8)
		outR.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, _ := outR.Read(buf); string(buf[:n]) != "planted\n" {
			t.Fatalf("the hostile sandbox did not start: %q", buf[:n])
		}

		second := shell(t, "ls /work")
		second.Workdir = filepath.Join(w, "up")
		_, err = run(t, second)
		setupErr(t, err, StepBind, unix.ELOOP)
		if os.Geteuid() == 0 {
			second.Workdir = w
			// A sandbox of its own host id: the lent, now non-empty directory
			// is the first one's, which it may not write.
			_, err = run(t, second)
			setupErr(t, err, StepBind, unix.EACCES)
			// One of the same host id: the lease's lock keeps it out.
			_, err = run(t, second, pin...)
			setupErr(t, err, StepBind, unix.EWOULDBLOCK)
		}

		p.Signal(unix.SIGKILL)
		p.Wait()
		if after := statOf(t, w); after != before {
			t.Fatalf("workdir left as %+v, found as %+v (uid %s)", after, before, strconv.Itoa(os.Geteuid()))
		}
	})
}
