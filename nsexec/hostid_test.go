//go:build linux

package nsexec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/conformance/testenv"
	"golang.org/x/sys/unix"
)

// holdVar tells the "hold-host-id" helper which lock directory and first
// id to use ("dir:first"); its range has one id.
const holdVar = "MOAT_NSEXEC_HOLD"

func init() {
	helpers["hold-host-id"] = helperHoldHostID
}

// helperHoldHostID starts a sandbox that sleeps, in a one-id range, says
// "held <sandbox pid> <uid>" and waits to be killed.
func helperHoldHostID() error {
	dir, first, _ := strings.Cut(os.Getenv(holdVar), ":")
	n, err := strconv.ParseUint(first, 10, 32)
	if err != nil {
		return err
	}
	p, err := Start(context.Background(), &Config{Args: []string{"/bin/sleep", "60"}}, Stdio{},
		WithHostIDRange(dir, uint32(n), 1))
	if err != nil {
		return err
	}
	fmt.Printf("held %d %d\n", p.Pid(), p.HostIdentity().UID)
	p.Wait()
	return nil
}

// startSleeper starts a sandbox that writes a secret into its workdir and
// sleeps; it returns once the secret is there.
func startSleeper(t *testing.T, wd string, opts ...Option) *Process {
	t.Helper()
	p, err := Start(context.Background(), &Config{
		Args:    []string{"/bin/sh", "-c", "echo secret > /work/secret && exec sleep 60"},
		Env:     []string{"PATH=/usr/bin:/bin"},
		Workdir: wd,
	}, Stdio{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Signal(syscall.SIGKILL); p.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(wd, "secret")); err == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox never wrote its secret")
		}
	}
}

// As root, two sandboxes running at once have different host ids, and a
// process running as one's host id (what a setuid file left by it would
// give any local user) can neither read nor write the other's workdir.
// With one shared id, both would succeed.
func TestConcurrentSandboxesOwnHostIDs(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	os.Chmod(base, 0o755) // so only the workdir's own mode protects it
	wds := [2]string{filepath.Join(base, "a"), filepath.Join(base, "b")}
	var ps [2]*Process
	for i, wd := range wds {
		if err := os.Mkdir(wd, 0o700); err != nil {
			t.Fatal(err)
		}
		ps[i] = startSleeper(t, wd)
	}
	ids := [2]Identity{ps[0].HostIdentity(), ps[1].HostIdentity()}
	for i, id := range ids {
		if id.UID < HostIDFirst || id.UID >= HostIDFirst+HostIDCount || id.GID != id.UID {
			t.Fatalf("sandbox %d maps to host %d:%d, outside the range %d+%d", i, id.UID, id.GID, HostIDFirst, HostIDCount)
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(wds[i], "secret"), &st); err != nil || st.Uid != id.UID {
			t.Fatalf("sandbox %d's file is owned by %d (%v), want its host id %d", i, st.Uid, err, id.UID)
		}
	}
	if ids[0].UID == ids[1].UID || ids[0].GID == ids[1].GID {
		t.Fatalf("two running sandboxes share host id %+v", ids[0])
	}
	for i := range 2 {
		other := wds[1-i]
		cmd := exec.Command("/bin/sh", "-c", `cat "$1/secret"; echo x > "$1/planted"; ls "$1"`, "sh", other)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: ids[i].UID, Gid: ids[i].GID}}
		out, _ := cmd.CombinedOutput()
		if strings.Contains(string(out), "secret\n") {
			t.Errorf("host id %d read sandbox %d's workdir:\n%s", ids[i].UID, 1-i, out)
		}
		if _, err := os.Stat(filepath.Join(other, "planted")); err == nil {
			t.Errorf("host id %d wrote into sandbox %d's workdir", ids[i].UID, 1-i)
		}
	}
}

// The allocator after a crash: a process holding the only id of a range is
// SIGKILLed; its sandbox dies with it, and the id is free again with no
// cleanup. While it lives, a second start fails with ErrHostIDsExhausted.
func TestHostIDFreedWhenHolderKilled(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "ids")
	const first = HostIDFirst + HostIDCount + 17 // outside the live range
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command(self)
	holder.Env = append(os.Environ(), helperVar+"=hold-host-id", fmt.Sprintf("%s=%s:%d", holdVar, dir, first))
	holder.Stderr = os.Stderr
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	var pid int
	var uid uint32
	if _, serr := fmt.Sscanf(line, "held %d %d", &pid, &uid); err != nil || serr != nil || uid != first {
		t.Fatalf("holder said %q (%v), want held <pid> %d", line, err, first)
	}

	_, err = Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, WithHostIDRange(dir, first, 1))
	if !errors.Is(err, ErrHostIDsExhausted) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a second start in the held range: %v, want ErrHostIDsExhausted naming %s", err, dir)
	}

	holder.Process.Signal(syscall.SIGKILL)
	holder.Wait()
	r := mustRun(t, &Config{Args: []string{"/bin/true"}}, WithHostIDRange(dir, first, 1))
	if r.exit.Code != 0 {
		t.Fatalf("start after the holder died: %+v", r.exit)
	}
	for deadline := time.Now().Add(5 * time.Second); unix.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the killed holder's sandbox (pid %d) outlived it", pid)
		}
	}
}

// The lock directory is used only if it is root's, mode 0700, reached
// through no symlink someone else could have planted (issue 28 item 7):
// anything else is an error, never repaired, and nothing is made where a
// refused link points, its missing parents included (os.MkdirAll made them
// through any link). Root's own link in its own directory is followed.
func TestHostIDLockDirRefused(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o755)
	real := filepath.Join(base, "real")
	os.Mkdir(real, 0o700)
	link := filepath.Join(base, "link")
	os.Symlink(real, link)
	os.Lchown(link, testenv.NobodyUID, testenv.NobodyGID)
	notRoot := filepath.Join(base, "nobody")
	os.Mkdir(notRoot, 0o700)
	os.Chown(notRoot, testenv.NobodyUID, testenv.NobodyGID)
	for _, dir := range []string{open, link, notRoot, filepath.Join(link, "ids")} {
		_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{}, WithHostIDRange(dir, HostIDFirst+HostIDCount, 4))
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("lock directory %s: got %v, want an error naming it", dir, err)
		}
	}
	if entries, _ := os.ReadDir(real); len(entries) != 0 {
		t.Errorf("a lock or directory was created through the symlink: %v", entries)
	}

	mine := filepath.Join(base, "mine")
	os.Symlink(real, mine)
	mustRun(t, &Config{Args: []string{"/bin/true"}}, WithHostIDRange(mine, HostIDFirst+HostIDCount, 4))
	if entries, _ := os.ReadDir(real); len(entries) == 0 {
		t.Error("no lock was taken through root's own link")
	}
}

// BenchmarkHostIDAcquire measures what the allocator adds to a root start
// (open the lock directory, open and flock lock files, close), with no other
// sandbox running and with 100 running (100 held ids scanned first).
func BenchmarkHostIDAcquire(b *testing.B) {
	testenv.RequireRoot(b)
	for _, held := range []int{0, 100} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			// /run, as HostIDLockDir: a tmpfs.
			dir, err := os.MkdirTemp("/run", "moat-bench-ids-")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.RemoveAll(dir) })
			r := idRange{dir: filepath.Join(dir, "ids"), first: HostIDFirst + HostIDCount, count: HostIDCount}
			for range held {
				l, err := r.acquire()
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(l.release)
			}
			for b.Loop() {
				l, err := r.acquire()
				if err != nil {
					b.Fatal(err)
				}
				l.release()
			}
		})
	}
}

// TestIdentityChosenBeforeTheSpawn: WithIdentityChosen hears the very id the
// sandbox then runs as (its workdir file is owned by it), before anything
// of the sandbox ran; an error from it fails the start with that error and
// frees the id, so the next start of a one-id range gets it. Rootless the
// id heard is the caller's own.
func TestIdentityChosenBeforeTheSpawn(t *testing.T) {
	asRootAndNobody(t, testIdentityChosenBeforeTheSpawn)
}

func testIdentityChosenBeforeTheSpawn(t *testing.T) {
	wd := t.TempDir()
	os.Chmod(wd, 0o777) // the sandbox's host id writes its file here
	var heard []Identity
	hear := WithIdentityChosen(func(id Identity) error {
		// Nothing was spawned yet: no file of the sandbox exists.
		if _, err := os.Stat(filepath.Join(wd, "secret")); err == nil {
			return errors.New("the sandbox ran before its identity was announced")
		}
		heard = append(heard, id)
		return nil
	})
	opts := []Option{hear}
	if IsHostRoot() {
		locks := t.TempDir()
		os.Chmod(locks, 0o700)
		opts = append(opts, WithHostIDRange(locks, HostIDFirst+HostIDCount-7, 1))
	}
	p := startSleeper(t, wd, opts...)
	if len(heard) != 1 || heard[0] != p.HostIdentity() {
		t.Fatalf("heard %+v, the sandbox runs as %+v", heard, p.HostIdentity())
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(wd, "secret"), &st); err != nil || st.Uid != heard[0].UID {
		t.Fatalf("the sandbox's file is owned by %d (%v), the hook heard %d", st.Uid, err, heard[0].UID)
	}
	p.Signal(unix.SIGKILL)
	p.Wait()

	refuse := errors.New("not this one")
	os.Remove(filepath.Join(wd, "secret"))
	_, err := Start(context.Background(), &Config{Args: []string{"/bin/true"}}, Stdio{},
		append(opts[1:], WithIdentityChosen(func(Identity) error { return refuse }))...)
	if !errors.Is(err, refuse) {
		t.Fatalf("a refusing hook: Start returned %v, want its error", err)
	}
	again := startSleeper(t, wd, opts...)
	defer func() { again.Signal(unix.SIGKILL); again.Wait() }()
	if again.HostIdentity() != heard[0] {
		t.Errorf("after the refused start the id %+v was not free again (got %+v)", heard[0], again.HostIdentity())
	}
}
